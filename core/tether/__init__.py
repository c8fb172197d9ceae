"""tether: train the LLM agents you already have.

Wrap an existing agent with ``tether.wrap``, then improve it with ``tether.Trainer``. Importing tether is
cheap: heavy parts (HTTP servers, models, frameworks) load on first use.
"""

from __future__ import annotations

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


def __getattr__(name: str) -> object:
    # GRPO needs torch: load it on first use so `import tether` stays light
    if name == "GRPO":
        from tether.algorithms import GRPO

        return GRPO
    if name == "Distill":
        from tether.algorithms import Distill

        return Distill
    if name == "SFT":
        from tether.algorithms import SFT

        return SFT
    if name == "APO":
        from tether.algorithms.apo import APO

        return APO
    if name == "Joint":
        from tether.algorithms.joint import Joint

        return Joint
    if name == "WarmStart":
        from tether.algorithms.warmstart import WarmStart

        return WarmStart
    if name == "VERL":  # imports no verl: that waits for VERL.fit
        from tether.algorithms.verl import VERL

        return VERL
    if name == "Judge":  # rewards without an answer key (tether.rewards)
        from tether.rewards.judge import Judge

        return Judge
    if name == "MajorityVote":
        from tether.rewards.majority import MajorityVote

        return MajorityVote
    raise AttributeError(f"module 'tether' has no attribute {name!r}")


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
