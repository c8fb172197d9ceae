"""The model-backend contract: what the proxy forwards a chat completion to.

A backend takes an OpenAI-style chat request and returns choices with the exact token ids it used and
produced (when it has them) and their logprobs, so the proxy can record them without re-tokenising.
Backends are chosen by ``model=`` strings; see ``tether.models.open_backend``. A backend whose weights tether
can update in place (the embedded and ``hf:`` ones) is also a ``TrainableBackend``.

**Capabilities.** What a backend can do beyond ``chat`` is a tier, each a ``runtime_checkable`` Protocol that
an algorithm tests with ``isinstance`` (never by looking a method up): ``TrainableBackend`` (weights updated in
place), ``LoRACapable`` (adapters attached before it starts), ``PolicyBackend`` and ``PolicyVersions`` (one set
of weights per policy of ``wrap(optimize={policy: [...]})``, and each one's version), ``RendersReplies`` (a chat
template that tokenizes a demonstration, what SFT needs) and ``RefitsTokenizer`` (a fresh model's tokenizer
retrained on a corpus). A backend lacking the tier an algorithm needs is refused with a ``ValueError`` naming
the backends that have it.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

#: how long a backend that forwards over HTTP waits for one answer by default: long enough for a long generation
#: on a busy server, short enough that a hung backend frees the proxy's call slots (``timeout_s=`` to change it)
DEFAULT_BACKEND_TIMEOUT_S = 120.0

if TYPE_CHECKING:
    from tether.models.lora import LoRA


class BackendError(Exception):
    """The backend could not answer (the proxy turns this into a 502 with the message)."""


class BadRequest(ValueError):
    """The request is malformed for this backend (the proxy turns this into a 400 with the message)."""


@dataclass(slots=True)
class ChatRequest:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    n: int = 1
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] | None = None
    seed: int | None = None
    model: str | None = None
    #: other OpenAI parameters (tool_choice, response_format, ...): passed through by remote backends
    extra: dict[str, Any] = field(default_factory=dict)
    #: the policy (trained weights, e.g. a LoRA adapter) that answers; None: the backend's default policy
    policy: str | None = None


@dataclass(slots=True)
class Choice:
    message: dict[str, Any]  # OpenAI assistant message: role, content, optional tool_calls
    finish_reason: str  # "stop", "length" or "tool_calls"
    response_token_ids: list[int] | None = None
    logprobs: list[float] | None = None  # one per response token, under the sampling distribution


@dataclass(slots=True)
class ChatResult:
    choices: list[Choice]
    model: str
    prompt_token_ids: list[int] | None = None  # shared by all choices
    usage: dict[str, int] = field(default_factory=dict)  # prompt_tokens, completion_tokens, total_tokens
    #: the version of the weights that sampled every choice (``TrainableBackend.weights_version``); None when
    #: the backend does not know it (remote APIs)
    weights_version: int | None = None

    @property
    def token_ids_available(self) -> bool:
        return self.prompt_token_ids is not None and all(c.response_token_ids is not None for c in self.choices)


class ModelBackend(abc.ABC):
    """A source of chat completions. ``start`` before the first ``chat``; ``close`` when done."""

    name: str = ""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Load weights, start servers. Idempotent."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what ``start`` took. Idempotent."""

    @abc.abstractmethod
    async def chat(self, request: ChatRequest) -> ChatResult:
        """Answer one chat request. ``BadRequest`` for requests this backend cannot take,
        ``BackendError`` when it fails."""


@runtime_checkable
class TrainableBackend(Protocol):
    """A backend whose weights an algorithm updates in place (GRPO): the embedded and ``hf:`` backends.

    ``policy()`` holds the weights (no batch is sampled meanwhile) and yields the torch model to update;
    ``save(dir)`` writes a checkpoint that ``load_weights(dir)`` reads back into the served model (a run
    resuming); ``pad_token_id`` pads update batches; ``weights_version`` counts updates (bumped when a
    ``policy()`` block ends) and is what each ``ChatResult`` records as the version that sampled it.
    ``attach_lora(lora)`` puts LoRA adapters on the policy before training starts (idempotent for the same
    setting): then only they train, the sampler serves base + adapter, and checkpoints hold the adapter (PEFT
    format).

    ``policy(name)`` takes a policy name where the backend holds one set of weights per policy
    (``declare_policies(names)``, which the Session calls for ``optimize={policy: [sub-agents]}``): the
    embedded and ``hf:`` backends, and vLLM with LoRA. ``weights_version`` is then the default policy's.
    """

    weights_version: int

    def policy(self, name: str | None = None) -> AbstractContextManager[Any]: ...

    def attach_lora(self, lora: LoRA) -> None: ...

    def save(self, directory: str) -> None: ...

    def load_weights(self, directory: str) -> None: ...

    @property
    def pad_token_id(self) -> int: ...


@runtime_checkable
class LoRACapable(Protocol):
    """A backend that trains LoRA adapters: ``attach_lora(lora)`` before it starts (the embedded, ``hf:`` and
    ``vllm:`` backends)."""

    def attach_lora(self, lora: LoRA) -> None: ...


def attach_lora(backend: ModelBackend, lora: LoRA, who: str, models: str) -> None:
    """Attach ``lora`` to ``backend`` before it starts; a ValueError naming what ``who`` (``"GRPO"``) needs, a
    backend of one of ``models`` (the ``model=`` strings whose backends hold adapters), for one that cannot."""
    if not isinstance(backend, LoRACapable):
        raise ValueError(
            f"{who}(lora=...) needs a backend that can hold LoRA adapters ({models}); the "
            f"{type(backend).__name__} cannot (it is no tether.models.base.LoRACapable)"
        )
    backend.attach_lora(lora)


@runtime_checkable
class PolicyBackend(Protocol):
    """A backend that holds one set of weights per policy (``wrap(optimize={policy: [sub-agents]})``):
    ``declare_policies(names)`` before it starts (the Session calls it); the embedded and ``hf:`` backends, and
    vLLM with LoRA."""

    def declare_policies(self, names: Sequence[str]) -> None: ...


@runtime_checkable
class PolicyVersions(Protocol):
    """A backend that trains one set of weights per policy: ``weights_version_of(name)`` is each policy's
    version (what a per-policy update measures staleness against)."""

    def weights_version_of(self, name: str | None = None) -> int: ...


@runtime_checkable
class RendersReplies(Protocol):
    """A backend whose chat template tokenizes a conversation and a reply to it (what SFT and a warm start
    train on when a call has no recorded token ids): the embedded and ``hf:`` backends."""

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]: ...

    def render_reply(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, reply: dict[str, Any]
    ) -> list[int]: ...


@runtime_checkable
class RefitsTokenizer(Protocol):
    """A backend whose tokenizer can be retrained on a corpus before training (a fresh embedded model):
    returns whether it did."""

    def refit_tokenizer(self, corpus: Iterable[str]) -> bool: ...
