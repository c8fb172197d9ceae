"""Puts tether's trace processor in front of the OpenAI Agents SDK's own, and takes it out again exactly.

``hold()`` (reference-counted, thread-safe: a ``tether.capture.patching.SharedPatch``) replaces the SDK's trace
processors with one ``TetherTraceProcessor`` (``agents.set_trace_processors``), which captures rollout spans
and forwards the rest to the processors it replaced; the SDK's default one uploads traces to api.openai.com,
so with the gate held nothing about a rollout leaves the process. If tracing was disabled
(``OPENAI_AGENTS_DISABLE_TRACING``, ``set_tracing_disabled(True)``) the gate turns it on, because capture and
agent names need the spans, and forwards nothing. The last ``release()`` puts back the previous processors
(keeping any the user added meanwhile) and the previous disabled setting.

The SDK has no public getter for its processors or its disabled setting: ``seam()`` reads them from the
default provider's private fields and raises ``SeamMissing`` naming the SDK version if a release moves them
(a test fails loudly then).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.capture.patching import SeamMissing as SeamMissing
from tether.capture.patching import SharedPatch

if TYPE_CHECKING:
    from tether_openai_agents.capture import TetherTraceProcessor

_MISSING = object()


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


@dataclass(slots=True)
class _Installed:
    provider: Any
    processor: TetherTraceProcessor
    previous: tuple[Any, ...]  # the processors it replaced
    manual_disabled: Any  # the provider's disabled setting to put back, or _MISSING when tracing was on


def _install() -> _Installed:
    from agents.tracing import get_trace_provider

    from tether_openai_agents.capture import TetherTraceProcessor

    provider = get_trace_provider()
    previous = processors(provider)
    enabled = tracing_enabled(provider)
    processor = TetherTraceProcessor(previous, forward=enabled)
    manual_disabled: Any = _MISSING
    if not enabled:
        manual_disabled = getattr(provider, "_manual_disabled", True)
        provider.set_disabled(False)
    provider.set_processors([processor])
    return _Installed(provider, processor, previous, manual_disabled)


def _uninstall(installed: _Installed) -> None:
    provider, processor = installed.provider, installed.processor
    processor.sink = None
    current = processors(provider)
    if processor in current:  # else the user replaced the processors meanwhile: keep theirs
        added = [p for p in current if p is not processor]
        provider.set_processors([*installed.previous, *added])
    if installed.manual_disabled is not _MISSING:
        _restore_disabled(provider, installed.manual_disabled)


_patch: SharedPatch[_Installed] = SharedPatch("openai-agents trace gate", _install, _uninstall)


def hold() -> TetherTraceProcessor:
    """Install the processor (first call) or add a reference to it; returns the processor."""
    return _patch.acquire().processor


def release() -> None:
    """Drop one reference; the last one restores the processors and the disabled setting. No-op if not held."""
    _patch.release()


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
    installed = _patch.value
    return installed.processor if installed is not None else None


def hold_count() -> int:
    return _patch.count
