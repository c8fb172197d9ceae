"""``Instrumentor`` (the sink and idempotency every adapter and tracer inherits) and ``Patch``."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import pytest

from tether.plugin.adapters import Adapter, Tracer
from tether.plugin.instrument import PATCH_TAG, Instrumentor, Patch, SpanSink
from tether.types import Resources, SpanKind


class _Sink:
    def __init__(self) -> None:
        self.spans: list[str] = []

    def emit(self, kind: SpanKind, name: str, attributes: dict[str, Any], **kwargs: Any) -> None:
        self.spans.append(name)


class _Counting(Instrumentor):
    """Records every call the base makes to the subclass hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    def _instrument(self, sink: SpanSink) -> None:
        assert self.sink is sink, "the sink is set before _instrument runs"
        self.calls.append(("instrument", sink))

    def _uninstrument(self) -> None:
        assert self.sink is not None, "the sink is still set while _uninstrument runs"
        self.calls.append(("uninstrument", None))

    def _repoint(self, sink: SpanSink) -> None:
        self.calls.append(("repoint", sink))


def test_instrument_once_then_same_sink_changes_nothing() -> None:
    inst, sink = _Counting(), _Sink()
    assert inst.sink is None and not inst.instrumented
    inst.instrument(sink)
    inst.instrument(sink)
    assert inst.calls == [("instrument", sink)]
    assert inst.sink is sink and inst.instrumented


def test_another_sink_repoints_without_installing_again() -> None:
    inst, first, second = _Counting(), _Sink(), _Sink()
    inst.instrument(first)
    inst.instrument(second)
    assert inst.calls == [("instrument", first), ("repoint", second)]
    assert inst.sink is second
    inst.uninstrument()
    assert inst.calls[-1] == ("uninstrument", None)
    assert [c[0] for c in inst.calls].count("uninstrument") == 1


def test_uninstrument_exactly_once_and_a_noop_when_not_instrumented() -> None:
    inst = _Counting()
    inst.uninstrument()
    assert inst.calls == []
    inst.instrument(_Sink())
    inst.uninstrument()
    inst.uninstrument()
    assert [c[0] for c in inst.calls] == ["instrument", "uninstrument"]
    assert inst.sink is None
    sink = _Sink()
    inst.instrument(sink)  # instrumenting again after uninstrument installs again
    assert inst.calls[-1] == ("instrument", sink)


def test_a_failing_instrument_leaves_it_uninstrumented() -> None:
    class _Broken(_Counting):
        def _instrument(self, sink: SpanSink) -> None:
            raise ImportError("no framework")

    inst = _Broken()
    with pytest.raises(ImportError):
        inst.instrument(_Sink())
    assert inst.sink is None
    inst.uninstrument()
    assert inst.calls == []  # nothing to undo


def test_uninstrument_forgets_the_sink_even_when_undo_fails() -> None:
    class _BadUndo(_Counting):
        def _uninstrument(self) -> None:
            raise RuntimeError("boom")

    inst = _BadUndo()
    inst.instrument(_Sink())
    with pytest.raises(RuntimeError):
        inst.uninstrument()
    assert inst.sink is None
    inst.uninstrument()  # not called a second time


def test_concurrent_instrument_installs_once() -> None:
    class _Slow(_Counting):
        def _instrument(self, sink: SpanSink) -> None:
            time.sleep(0.01)  # widen the window in which a second caller could slip in
            super()._instrument(sink)

    barrier = threading.Barrier(8)
    inst, sink = _Slow(), _Sink()

    def go() -> None:
        barrier.wait()
        inst.instrument(sink)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert inst.calls == [("instrument", sink)]


def test_a_subclass_that_skips_init_still_works() -> None:
    class _NoInit(Tracer):
        def __init__(self) -> None:  # predates the base: never calls super().__init__()
            self.installed = 0

        def _instrument(self, sink: SpanSink) -> None:
            self.installed += 1

        def _uninstrument(self) -> None:
            self.installed -= 1

    tracer = _NoInit()
    assert tracer.sink is None
    tracer.uninstrument()
    tracer.instrument(_Sink())
    tracer.instrument(_Sink())
    assert tracer.installed == 1
    tracer.uninstrument()
    assert tracer.installed == 0 and tracer.sink is None


def test_adapters_keep_their_abstract_methods_and_get_instrument_for_free() -> None:
    class _Half(Adapter):
        name = "half"

        def accepts(self, agent: Any) -> bool:
            return False

    with pytest.raises(TypeError, match="run"):
        _Half()  # type: ignore[abstract]

    class _Whole(_Half):
        async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
            return task

    adapter = _Whole()
    adapter.instrument(_Sink())
    assert adapter.instrumented
    adapter.uninstrument()
    assert not adapter.instrumented


# -- Patch ----------------------------------------------------------------------------------------------


class _Base:
    def greet(self) -> str:
        return "base"


class _Target(_Base):
    def hello(self) -> str:
        return "hello"


def _shout(original: Any) -> Any:
    def hello(self: Any) -> str:
        return str(original(self)).upper()

    return hello


def test_patch_replaces_tags_and_restores_exactly() -> None:
    original = _Target.__dict__["hello"]
    patch = Patch(_Target, "hello", _shout)
    patch.apply()
    assert _Target().hello() == "HELLO"
    assert patch.applied and patch.original is original
    assert Patch.is_patch(_Target.__dict__["hello"]) and getattr(_Target.hello, PATCH_TAG) is True
    assert not Patch.is_patch(original)
    assert patch.undo() is True
    assert _Target.__dict__["hello"] is original and not patch.applied


def test_patch_is_idempotent_and_reusable() -> None:
    original = _Target.__dict__["hello"]
    wrapped: list[Any] = []

    def wrap(fn: Any) -> Any:
        wrapped.append(fn)
        return _shout(fn)

    patch = Patch(_Target, "hello", wrap)
    patch.apply()
    patch.apply()  # no second wrapper around the first
    assert wrapped == [original] and _Target().hello() == "HELLO"
    assert patch.undo() and patch.undo()  # undoing twice: nothing left to do
    assert _Target.__dict__["hello"] is original
    patch.apply()
    assert _Target().hello() == "HELLO"
    patch.undo()
    assert _Target.__dict__["hello"] is original


def test_someone_patched_over_ours_is_left_in_place(caplog: pytest.LogCaptureFixture) -> None:
    original = _Target.__dict__["hello"]
    patch = Patch(_Target, "hello", _shout)
    patch.apply()
    ours = _Target.__dict__["hello"]

    def theirs(self: Any) -> str:
        return "theirs:" + str(ours(self))

    _Target.hello = theirs  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.INFO, logger="tether.capture.patching"):
            assert patch.undo() is False
        assert _Target.__dict__["hello"] is theirs, "their patch (wrapping ours) stays"
        assert "_Target.hello" in caplog.text
        assert not patch.applied
        assert patch.undo() is True  # nothing more to undo
    finally:
        _Target.hello = original  # type: ignore[method-assign]


def test_patching_an_inherited_attribute_deletes_on_undo() -> None:
    patch = Patch(_Target, "greet", _shout)
    patch.apply()
    assert "greet" in _Target.__dict__ and _Target().greet() == "BASE"
    assert patch.undo()
    assert "greet" not in _Target.__dict__ and _Target().greet() == "base"


def test_patch_a_module_attribute_and_an_instance() -> None:
    import types

    module: Any = types.ModuleType("m")
    module.f = lambda: 1
    before = module.f
    patch = Patch(module, "f", lambda fn: lambda: fn() + 1)
    patch.apply()
    assert module.f() == 2
    patch.undo()
    assert module.f is before

    obj = _Target()
    on_instance = Patch(obj, "hello", lambda bound: lambda: bound() + "!")
    on_instance.apply()
    assert obj.hello() == "hello!" and _Target().hello() == "hello"
    on_instance.undo()
    assert "hello" not in vars(obj) and obj.hello() == "hello"


def test_patch_of_a_missing_attribute_raises() -> None:
    with pytest.raises(AttributeError):
        Patch(_Target, "nope", _shout).apply()


# -- patches an instrumentor applies with _patch ----------------------------------------------------------


class _Patching(Instrumentor):
    """Patches ``_Target.hello`` and ``_Target.greet`` through ``_patch``; optionally fails after the first."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.patched_while_uninstrumenting: bool | None = None

    def _instrument(self, sink: SpanSink) -> None:
        self._patch(Patch(_Target, "hello", _shout))
        if self.fail:
            raise RuntimeError("the framework moved")
        self._patch(Patch(_Target, "greet", _shout))

    def _uninstrument(self) -> None:
        self.patched_while_uninstrumenting = _Target().hello() == "HELLO"


def test_patches_applied_with__patch_are_undone_after__uninstrument() -> None:
    hello, inherited = _Target.__dict__["hello"], "greet" not in _Target.__dict__
    inst = _Patching()
    inst.instrument(_Sink())
    assert (_Target().hello(), _Target().greet()) == ("HELLO", "BASE")
    inst.uninstrument()
    assert inst.patched_while_uninstrumenting is True, "_uninstrument runs before the patches are undone"
    assert _Target.__dict__["hello"] is hello and ("greet" not in _Target.__dict__) == inherited
    inst.instrument(_Sink())  # and again: the same patches, applied afresh
    assert _Target().hello() == "HELLO"
    inst.uninstrument()
    assert _Target.__dict__["hello"] is hello


def test_a_failing__instrument_undoes_the_patches_it_applied() -> None:
    hello = _Target.__dict__["hello"]
    inst = _Patching(fail=True)
    with pytest.raises(RuntimeError, match="moved"):
        inst.instrument(_Sink())
    assert _Target.__dict__["hello"] is hello and not inst.instrumented


def test_a_pickled_instrumentor_leaves_its_patches_behind() -> None:
    inst = _Patching()
    inst.instrument(_Sink())
    try:
        state = inst.__getstate__()
        assert "_patches" not in state and state["_sink"] is None
    finally:
        inst.uninstrument()


def test_the_default_accepts_claims_instances_of_agent_types_in_loaded_modules_only() -> None:
    class _Typed(Adapter):
        name = "typed"
        agent_types = ((__name__, "_Base"), ("not_imported_framework.agents", "Agent"))

        async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
            return task

    class _Untyped(_Typed):
        agent_types = ()

    adapter = _Typed()
    assert adapter.accepts(_Target()) and adapter.accepts(_Base())
    assert not adapter.accepts(_Target) and not adapter.accepts("text")  # a class, another object
    assert "not_imported_framework" not in sys.modules, "accepts never imports a framework"
    assert not _Untyped().accepts(_Target())
