"""``Distill``'s teacher: which models can score the student's own tokens, loading one, and the tokenizer check.

A teacher must give the log-probability of *given* token ids (the student's prompt and sampled reply) under its
own weights. A model tether holds in torch does (``embedded:<checkpoint>``, ``hf:<hub id or dir>``, ``smollm2``,
a run's checkpoint, LoRA adapter checkpoints included: ``LocalTeacher``), and so does a vLLM server through its
``prompt_logprobs`` (``vllm:<model>``: ``tether.algorithms.distill.vllm_teacher``). An OpenAI-compatible API
(``http(s)://...``) returns logprobs of its own samples only, so it is refused when ``Distill`` is built
(``check_spec``), as is a fresh random ``"embedded"`` model.

The teacher scores token ids the student produced, so both must read ids alike
(``tether.algorithms.distill.tokens``); ``Distill`` refuses a teacher that differs, before any rollout runs.
This module loads without torch; opening a local teacher imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tether.algorithms.distill.tokens import tokenizer_mismatch, vocab_of
from tether.models.base import ModelBackend

if TYPE_CHECKING:
    import torch

#: the ``model=`` forms a teacher takes
FORMS = '"embedded:<checkpoint dir>", "hf:<hub id or dir>", "smollm2" or "vllm:<model>"'


class Teacher(Protocol):
    """A model that scores given token ids: what ``Distill`` asks of its teacher."""

    name: str

    def score(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``log p_teacher(ids[:, p + 1] | ids[:, : p + 1])`` at every position ``p`` where ``mask > 0`` (0
        elsewhere), shaped as ``mask`` (``[rows, width - 1]``) on ``mask``'s device."""
        ...

    def mismatch(self, student: ModelBackend) -> str | None:
        """Why ``student``'s token ids would not mean the same to this teacher; None when they do."""
        ...

    def close(self) -> None:
        """Release the teacher's model (and its server)."""
        ...


def check_spec(teacher: object) -> None:
    """Refuse, with the reason, a teacher that cannot score the student's tokens, from its spec alone."""
    if isinstance(teacher, ModelBackend):
        from tether.models.local._backend import LocalBackend

        if not isinstance(teacher, LocalBackend):
            raise ValueError(
                f"Distill(teacher=...) scores the student's own tokens, which the {type(teacher).__name__} "
                f"cannot: give {FORMS}"
            )
        return
    if not isinstance(teacher, str) or not teacher.strip():
        raise ValueError(f"Distill needs a teacher that scores given token ids: teacher={FORMS}")
    spec = teacher.strip()
    if spec.startswith(("http://", "https://")):
        raise ValueError(
            f"Distill(teacher={spec!r}): an OpenAI-compatible API returns logprobs of its own samples only, it "
            "cannot score the student's tokens. Use a local teacher with the student's tokenizer "
            f"({FORMS}); to learn from an API model, run tether.WarmStart(teacher={spec!r}) first"
        )
    if spec == "embedded":
        raise ValueError(
            'Distill(teacher="embedded") would be a fresh model with random weights: give a trained checkpoint, '
            '"embedded:<checkpoint dir>" (a run\'s checkpoint folder)'
        )
    if not spec.startswith(("embedded:", "hf:", "vllm:", "smollm2?")) and spec != "smollm2":
        raise ValueError(f"Distill(teacher={spec!r}) is not a model tether can score tokens with: give {FORMS}")


def open_teacher(teacher: str | ModelBackend) -> Teacher:
    """The teacher ``teacher`` names (``check_spec`` first), its weights loaded; a ``vllm:`` one is not started
    (``VLLMTeacher.start``)."""
    check_spec(teacher)
    if isinstance(teacher, str) and teacher.strip().startswith("vllm:"):
        from tether.algorithms.distill.vllm_teacher import VLLMTeacher

        return VLLMTeacher(teacher.strip()[len("vllm:") :])
    return LocalTeacher(teacher)


class LocalTeacher:
    """A teacher held in torch: the model of an embedded or ``hf:`` backend, never started (it samples
    nothing), frozen."""

    def __init__(self, teacher: str | ModelBackend) -> None:
        from tether.models import open_backend
        from tether.models.local._backend import LocalBackend

        if isinstance(teacher, str):
            spec = teacher.strip()
            path = spec.partition(":")[2]
            if spec.startswith("embedded:") and _is_adapter_dir(path):
                spec = f"hf:{path}"  # (the hf: backend serves an adapter on its base, embedded bases included)
            backend = open_backend(spec)
            self.name = spec
        else:
            backend = teacher
            self.name = backend.name or type(backend).__name__
        if not isinstance(backend, LocalBackend):  # (check_spec's forms all open one)
            raise ValueError(f"Distill(teacher={self.name!r}) is no model tether holds in torch: give {FORMS}")
        self.backend = backend
        self.model = backend.model.eval().requires_grad_(False)

    def score(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        import torch

        from tether.algorithms import batching

        device = next(self.model.parameters()).device
        with torch.no_grad():
            scored = batching.token_logprobs(self.model, ids.to(device), 1.0, mask.to(device))
        return (scored.float() * mask.to(device)).to(mask.device)

    def mismatch(self, student: ModelBackend) -> str | None:
        return tokenizer_mismatch(student, self.name, vocab=vocab_of(self.backend), render=self.backend.render)

    def close(self) -> None:
        del self.model  # (the backend was never started: nothing else to stop)


def _is_adapter_dir(path: str) -> bool:
    from tether.models.lora import is_adapter_dir

    return bool(path) and is_adapter_dir(path)
