"""The records tether passes around: tasks, rollouts, attempts, spans, resources, transitions.

All are plain dataclasses (slots, no validation on construction) so building and serialising them stays
cheap on the hot paths (proxy capture, span batches). Each has ``to_dict`` / ``from_dict`` producing JSON-ready
dicts; the store backends and the HTTP wire format use exactly these.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Self, TypeVar


class RolloutStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in _FINISHED_ROLLOUT


_FINISHED_ROLLOUT = frozenset({RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.CANCELLED})


class AttemptStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"  # exceeded its timeout or missed its heartbeat; the rollout was requeued or failed
    CANCELLED = "cancelled"


class Mode(StrEnum):
    TRAIN = "train"
    VAL = "val"


class SpanKind(StrEnum):
    LLM = "llm"
    TOOL = "tool"
    REWARD = "reward"
    OTHER = "other"


def new_id(prefix: str) -> str:
    """A short random id with a readable prefix (``ro-``, ``at-``, ``sp-``): 16 hex digits.

    ``os.urandom`` rather than ``uuid4``: the proxy makes two ids per captured call and uuid4 costs ~4x more.
    """
    return f"{prefix}-{os.urandom(8).hex()}"


_T = TypeVar("_T")


class _Record:
    """Mixin: dict round-trip for the dataclasses below."""

    __slots__ = ()
    #: the fields ``from_dict`` turns back into their enum (JSON holds the value)
    _ENUMS: ClassVar[Mapping[str, type[StrEnum]]] = {}

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        names = _field_names(cls)
        obj = cls(**{k: v for k, v in data.items() if k in names})
        for name, enum in cls._ENUMS.items():
            setattr(obj, name, enum(getattr(obj, name)))
        return obj


_FIELD_CACHE: dict[type, frozenset[str]] = {}


def _field_names(cls: type) -> frozenset[str]:
    names = _FIELD_CACHE.get(cls)
    if names is None:
        names = frozenset(f.name for f in dataclasses.fields(cls))
        _FIELD_CACHE[cls] = names
    return names


@dataclass(slots=True)
class Task(_Record):
    """One input for the agent. ``input`` is whatever the agent's run function takes (JSON-serialisable)."""

    input: Any
    task_id: str = field(default_factory=lambda: new_id("task"))
    metadata: dict[str, Any] = field(default_factory=dict)


#: an attempt whose worker sent no span and no heartbeat for this long is presumed dead (its process died):
#: ``requeue_stale`` ends it ``timeout`` and requeues or fails its rollout. Runners heartbeat the attempts they
#: run (``tether.training.engine.runner``), so a slow model call is not mistaken for a dead worker.
DEFAULT_HEARTBEAT_TIMEOUT_S = 300.0


@dataclass(slots=True)
class RolloutSpec(_Record):
    """What the trainer asks the store to enqueue: one run of the agent on one task."""

    input: Any
    task_id: str | None = None
    mode: Mode = Mode.TRAIN
    metadata: dict[str, Any] = field(default_factory=dict)
    max_attempts: int = 1
    timeout_s: float | None = None  # wall-clock limit for one attempt
    #: an attempt with no span or heartbeat for this long is presumed dead; None: never (nothing sweeps it)
    heartbeat_timeout_s: float | None = DEFAULT_HEARTBEAT_TIMEOUT_S
    resources_version: int | None = None


@dataclass(slots=True)
class Rollout(_Record):
    _ENUMS: ClassVar[Mapping[str, type[StrEnum]]] = {"mode": Mode, "status": RolloutStatus}

    rollout_id: str
    input: Any
    task_id: str
    mode: Mode = Mode.TRAIN
    status: RolloutStatus = RolloutStatus.QUEUED
    metadata: dict[str, Any] = field(default_factory=dict)
    max_attempts: int = 1
    timeout_s: float | None = None
    heartbeat_timeout_s: float | None = None
    resources_version: int | None = None
    attempt_count: int = 0
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    output: Any = None
    reward: float | None = None
    error: str | None = None


@dataclass(slots=True)
class Attempt(_Record):
    _ENUMS: ClassVar[Mapping[str, type[StrEnum]]] = {"status": AttemptStatus}

    attempt_id: str
    rollout_id: str
    index: int  # 1 for the first attempt of a rollout
    worker_id: str
    status: AttemptStatus = AttemptStatus.RUNNING
    started_at: float = field(default_factory=time.time)
    last_heartbeat_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    error: str | None = None


@dataclass(slots=True)
class Span(_Record):
    """One captured event of an attempt. ``sequence`` is assigned by the store, in arrival order per attempt.

    ``attributes`` holds the kind-specific payload, laid out as ``tether.spans`` describes (its constants name
    every key):

    - the proxy's ``llm`` span of a call (name ``spans.LLM_CALL``), nested ``spans.ProxyLLMAttributes``:
      ``call_id``, ``request`` (``messages``, ``tools``, ``params``), ``prompt_token_ids``, ``choices`` (each
      ``message``, ``finish_reason``, ``response_token_ids``, ``logprobs``), ``usage``, ``model``,
      ``latency_ms``, ``token_ids_available``, ``weights_version``;
    - an adapter's own ``llm`` span (any other name), flat keys: ``request.messages``, ``request.model``,
      ``request.tools``;
    - ``tool`` spans: ``tool.name``, ``tool.arguments``, ``tool.call_id``, and ``tool.result`` or
      ``tool.error``;
    - ``reward`` spans: ``reward.value``.

    The sub-agent that produced the span is ``agent_name``, not an attribute.
    """

    _ENUMS: ClassVar[Mapping[str, type[StrEnum]]] = {"kind": SpanKind}

    rollout_id: str
    attempt_id: str
    kind: SpanKind
    name: str
    agent_name: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    span_id: str = field(default_factory=lambda: new_id("sp"))
    parent_id: str | None = None
    start_time: float = field(default_factory=time.time)
    end_time: float | None = None
    sequence: int | None = None


@dataclass(slots=True)
class PromptTemplate(_Record):
    """A named prompt the algorithms may rewrite. ``engine`` is ``"f-string"`` or ``"jinja"``.

    ``system_message_of`` and ``replaces`` make it a system message swapped in flight (APO's
    ``system_message_of``, ``tether.proxy.system_messages``): the calls of that sub-agent whose system message
    is exactly ``replaces`` get this template's text instead. Both are None for a template the agent reads.
    """

    template: str
    engine: str = "f-string"
    system_message_of: str | None = None
    replaces: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"template": self.template, "engine": self.engine}
        if self.system_message_of is not None or self.replaces is not None:
            out["system_message_of"], out["replaces"] = self.system_message_of, self.replaces
        return out

    def format(self, **values: Any) -> str:
        if self.engine == "jinja":
            import jinja2  # lazy: only users of jinja templates need it

            rendered: str = jinja2.Template(self.template).render(**values)
            return rendered
        return self.template.format(**values)


@dataclass(slots=True)
class LLMEndpoint(_Record):
    """Where agents send model calls: the sampling and model name of a resources version, and the URL.

    The URL is the runner's to decide: a resources version the trainer publishes has none (``""``), and each
    rollout's agent gets an endpoint whose ``base_url`` is its attempt's proxy URL (``Runner``)."""

    base_url: str = ""
    model: str = "tether"
    sampling: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Resources(_Record):
    """A versioned bundle of what agents use: the LLM endpoint and prompt templates."""

    version: int
    llm: LLMEndpoint | None = None
    prompts: dict[str, PromptTemplate] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "llm": self.llm.to_dict() if self.llm else None,
            "prompts": {k: v.to_dict() for k, v in self.prompts.items()},
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        llm = data.get("llm")
        return cls(
            version=data["version"],
            llm=LLMEndpoint.from_dict(llm) if isinstance(llm, dict) else llm,
            prompts={
                k: (PromptTemplate.from_dict(v) if isinstance(v, dict) else v)
                for k, v in (data.get("prompts") or {}).items()
            },
            created_at=data.get("created_at", time.time()),
        )


@dataclass(slots=True)
class Transition(_Record):
    """One LLM call of a finished attempt, ready for an algorithm (filled by
    ``tether.training.signal.transitions``)."""

    rollout_id: str
    attempt_id: str
    task_id: str
    agent_name: str | None
    step: int
    messages: list[dict[str, Any]]
    response: dict[str, Any]
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    logprobs: list[float] | None
    reward: float
    trainable: bool
    advantage: float | None = None
    #: the version of the weights that sampled the call (the backend's ``weights_version``); None if unknown
    weights_version: int | None = None
    #: the policy that served the call (``tether.policies``: a trained policy's name or ``"frozen"``); None if
    #: unknown (spans stored before policies were recorded)
    policy: str | None = None
    #: the sub-agent or policy whose final reward the call is credited with (a key of the ``reward=`` mapping),
    #: None for the rollout's own reward
    target: str | None = None
    #: that final reward (None when the rollout has no reward)
    target_reward: float | None = None
    #: the rewards emitted for the call (``tether.emit_reward``; ``credit="per_call"`` credits them)
    step_reward: float = 0.0
    #: the tools it requested that failed (each costs it ``tool_error_penalty``)
    failed_tools: int = 0


class RewardError(Exception):
    """The ``reward=`` function raised or returned something that is not a reward; the rollout fails with it."""


def check_rewards(value: Any) -> float | dict[str, float]:
    """A ``reward=`` function's value: a finite number, or a non-empty mapping from sub-agent or policy names
    (non-empty strings) to finite numbers (returned as a dict); ``ValueError`` naming what is wrong otherwise."""
    if not isinstance(value, Mapping):
        return check_reward(value)
    if not value:
        raise ValueError(
            "reward= returned an empty mapping: return a number, or {sub-agent or policy name: number, ...}"
        )
    out: dict[str, float] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise ValueError(
                f"reward= returned a mapping with key {key!r}: its keys must be sub-agent or policy names "
                "(non-empty strings)"
            )
        try:
            out[key] = check_reward(item)
        except ValueError as exc:
            raise ValueError(f"reward= returned {{{key!r}: {item!r}}}: {exc}") from None
    return out


def check_reward(value: Any) -> float:
    """Return ``value`` as a float (``True``/``False`` count as 1.0/0.0, the way ``return out == answer``
    means them), or raise ``ValueError`` if it is not a finite number."""
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, int | float):
        raise ValueError(f"reward must be a finite number, got {type(value).__name__} {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"reward must be a finite number, got {out!r}")
    return out
