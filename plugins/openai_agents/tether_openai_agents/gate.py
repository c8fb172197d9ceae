"""Puts tether's trace processor in front of the OpenAI Agents SDK's own, and takes it out again exactly.

``hold()`` (reference-counted, thread-safe) replaces the SDK's trace processors with one
``TetherTraceProcessor`` (``agents.set_trace_processors``), which captures rollout spans and forwards the
rest to the processors it replaced; the SDK's default one uploads traces to api.openai.com, so with the gate
held nothing about a rollout leaves the process. If tracing was disabled (``OPENAI_AGENTS_DISABLE_TRACING``,
``set_tracing_disabled(True)``) the gate turns it on, because capture and agent names need the spans, and
forwards nothing. The last ``release()`` puts back the previous processors (keeping any the user added
meanwhile) and the previous disabled setting.

The SDK has no public getter for its processors or its disabled setting: ``seam()`` reads them from the
default provider's private fields and raises ``SeamMissing`` naming the SDK version if a release moves them
(a test fails loudly then).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether_openai_agents.capture import TetherTraceProcessor

_MISSING = object()
_lock = threading.Lock()
_count = 0
_processor: TetherTraceProcessor | None = None
_provider: Any = None
_previous: tuple[Any, ...] = ()
_manual_disabled: Any = _MISSING


class SeamMissing(RuntimeError):
    """The installed ``openai-agents`` no longer keeps its trace processors where tether reads them."""


def _sdk_version() -> str:
    try:
        from agents.version import __version__

        return str(__version__)
    except Exception:
        return "?"


def processors(provider: Any) -> tuple[Any, ...]:
    """The trace processors ``provider`` calls now, in order (``SeamMissing`` if they cannot be read)."""
    multi = getattr(provider, "_multi_processor", None)
    found = getattr(multi, "_processors", None)
    if not isinstance(found, tuple):
        raise SeamMissing(
            f"openai-agents {_sdk_version()}: cannot read the trace processors of {type(provider).__qualname__} "
            "(expected a tuple at ._multi_processor._processors); tether_openai_agents.gate needs updating for "
            "this release, or pin the openai-agents version it supports"
        )
    return found


def tracing_enabled(provider: Any) -> bool:
    """Whether ``provider`` creates real traces now (public API: a disabled provider returns a no-op)."""
    from agents.tracing.traces import NoOpTrace

    return not isinstance(provider.create_trace("tether-probe"), NoOpTrace)  # not started: no event


def hold() -> TetherTraceProcessor:
    """Install the processor (first call) or add a reference to it; returns the processor."""
    global _count, _processor, _provider, _previous, _manual_disabled
    with _lock:
        if _count == 0 or _processor is None:
            from agents.tracing import get_trace_provider

            from tether_openai_agents.capture import TetherTraceProcessor

            provider = get_trace_provider()
            previous = processors(provider)
            enabled = tracing_enabled(provider)
            processor = TetherTraceProcessor(previous, forward=enabled)
            _manual_disabled = _MISSING
            if not enabled:
                _manual_disabled = getattr(provider, "_manual_disabled", True)
                provider.set_disabled(False)
            provider.set_processors([processor])
            _provider, _previous, _processor = provider, previous, processor
        _count += 1
        return _processor


def release() -> None:
    """Drop one reference; the last one restores the processors and the disabled setting. No-op if not held."""
    global _count, _processor, _provider, _previous, _manual_disabled
    with _lock:
        if _count == 0:
            return
        _count -= 1
        if _count:
            return
        provider, processor = _provider, _processor
        if provider is not None and processor is not None:
            processor.sink = None
            current = processors(provider)
            if processor in current:  # else the user replaced the processors meanwhile: keep theirs
                added = [p for p in current if p is not processor]
                provider.set_processors([*_previous, *added])
            if _manual_disabled is not _MISSING:
                _restore_disabled(provider, _manual_disabled)
        _provider, _processor, _previous, _manual_disabled = None, None, (), _MISSING


def _restore_disabled(provider: Any, manual: Any) -> None:
    # DefaultTraceProvider: the manual setting (None: follow OPENAI_AGENTS_DISABLE_TRACING) and its refresh
    refresh = getattr(provider, "_refresh_disabled_flag", None)
    if hasattr(provider, "_manual_disabled") and callable(refresh):
        provider._manual_disabled = manual
        refresh()
    else:
        provider.set_disabled(True)


def held() -> TetherTraceProcessor | None:
    """The installed processor while the gate is held."""
    return _processor if _count else None


def hold_count() -> int:
    return _count
