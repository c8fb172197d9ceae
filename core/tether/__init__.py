"""tether: train the LLM agents you already have.

Wrap an existing agent with ``tether.wrap``, then improve it with ``tether.Trainer``. Importing tether is
cheap: heavy parts (HTTP servers, models, frameworks) load on first use.
"""

from __future__ import annotations

import importlib

from tether.algorithms.base import Algorithm
from tether.capture.emit import emit_reward, emit_span
from tether.capture.passthrough import passthrough
from tether.models.base import TrainableBackend
from tether.models.lora import LoRA
from tether.otel.export import OTLPExport
from tether.plugin.adapters import Adapter, SpanSink, Tracer
from tether.plugin.hookspecs import hookimpl, hookspec
from tether.plugin.manager import AdapterNotFound, get_plugins
from tether.plugin.wrap import WrappedAgent, wrap
from tether.store import Store, StoreError, open_store
from tether.trainer import Trainer
from tether.training.engine.ray_runners import RayRunners
from tether.training.engine.session import Session
from tether.training.run.health import FitError
from tether.training.run.result import FitResult
from tether.training.signal.batch import Batch
from tether.types import (
    Attempt,
    AttemptStatus,
    LLMEndpoint,
    Mode,
    PromptTemplate,
    Resources,
    Rollout,
    RolloutSpec,
    RolloutStatus,
    Span,
    SpanKind,
    Task,
    Transition,
)

__version__ = "0.1.0"


#: loaded on first use so that `import tether` stays light (GRPO, Distill and SFT need torch; VERL imports no verl
#: until VERL.fit): the module each name comes from
_LAZY = {
    **dict.fromkeys(("APO", "GRPO", "Distill", "Joint", "SFT", "VERL", "WarmStart"), "tether.algorithms"),
    "Judge": "tether.rewards.judge",  # rewards without an answer key (tether.rewards)
    "MajorityVote": "tether.rewards.majority",
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    # the lazily loaded algorithms too, so completion (IPython, editors) offers tether.GRPO and the others
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "APO",
    "GRPO",
    "SFT",
    "VERL",
    "Adapter",
    "AdapterNotFound",
    "Algorithm",
    "Attempt",
    "AttemptStatus",
    "Batch",
    "Distill",
    "FitError",
    "FitResult",
    "Joint",
    "Judge",
    "LLMEndpoint",
    "LoRA",
    "MajorityVote",
    "Mode",
    "OTLPExport",
    "PromptTemplate",
    "RayRunners",
    "Resources",
    "Rollout",
    "RolloutSpec",
    "RolloutStatus",
    "Session",
    "Span",
    "SpanKind",
    "SpanSink",
    "Store",
    "StoreError",
    "Task",
    "Tracer",
    "TrainableBackend",
    "Trainer",
    "Transition",
    "WarmStart",
    "WrappedAgent",
    "__version__",
    "emit_reward",
    "emit_span",
    "get_plugins",
    "hookimpl",
    "hookspec",
    "open_store",
    "passthrough",
    "wrap",
]
