"""``SharedPatch``: installed on the first hold, undone on the last release, exactly once however the holds
nest or interleave across threads."""

from __future__ import annotations

import threading

import pytest

from tether.capture.patching import SharedPatch


class _Target:
    """A stand-in for a process-wide thing to patch; records every install and undo."""

    def __init__(self) -> None:
        self.patched = False
        self.log: list[str] = []

    def install(self) -> str:
        assert not self.patched, "installed twice"
        self.patched = True
        self.log.append("install")
        return "token"

    def uninstall(self, value: str) -> None:
        assert self.patched and value == "token", "undone twice or with the wrong value"
        self.patched = False
        self.log.append("uninstall")


def test_nested_holds_install_once_and_restore_on_the_last_release() -> None:
    target = _Target()
    patch = SharedPatch("target", target.install, target.uninstall)
    assert patch.count == 0 and patch.value is None
    with patch.held() as outer:
        assert outer == "token" and target.patched and patch.count == 1
        assert patch.acquire() == "token" and patch.count == 2
        with patch.held():
            assert patch.count == 3
        patch.release()
        assert target.patched and patch.value == "token"
    assert not target.patched and patch.count == 0 and patch.value is None
    assert target.log == ["install", "uninstall"]
    patch.release()  # not held: a no-op
    assert patch.count == 0 and target.log == ["install", "uninstall"]


def test_holds_from_many_threads_install_and_restore_exactly_once() -> None:
    target = _Target()
    patch = SharedPatch("target", target.install, target.uninstall)
    start = threading.Barrier(16)
    errors: list[BaseException] = []

    def hold_and_release() -> None:
        try:
            start.wait()
            for _ in range(200):
                with patch.held():
                    assert target.patched
                    with patch.held():
                        assert target.patched
        except BaseException as exc:
            errors.append(exc)

    patch.acquire()  # one outer hold for the whole run: the patch must stay in throughout
    threads = [threading.Thread(target=hold_and_release) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert patch.count == 1 and target.log == ["install"]
    patch.release()
    assert not target.patched and target.log == ["install", "uninstall"]


def test_racing_first_and_last_holds_never_install_twice() -> None:
    target = _Target()
    patch = SharedPatch("target", target.install, target.uninstall)
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            for _ in range(500):
                with patch.held():
                    assert target.patched
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert patch.count == 0 and not target.patched
    assert target.log.count("install") == target.log.count("uninstall") >= 1


def test_a_failing_install_holds_nothing() -> None:
    calls: list[str] = []

    def broken() -> None:
        calls.append("install")
        raise RuntimeError("seam moved")

    patch: SharedPatch[None] = SharedPatch("broken", broken, lambda _: calls.append("uninstall"))
    with pytest.raises(RuntimeError, match="seam moved"), patch.held():
        pass
    assert patch.count == 0 and calls == ["install"]
    patch.release()
    assert calls == ["install"]


def test_one_patch_module_defines_every_patch_helper_and_seam_error() -> None:
    """``Patch``, ``SharedPatch`` and ``SeamMissing`` are defined once, in ``tether.capture.patching``; the
    redirect, the plugin contract and the plugins use those (a second ``SeamMissing`` would escape an
    ``except SeamMissing`` written against the first)."""
    import ast
    from pathlib import Path

    from tether.capture import patching
    from tether.plugin import instrument

    root = Path(__file__).resolve().parents[3]
    defined = {
        f"{path.relative_to(root)}:{node.name}"
        for folder in ("core", "plugins")
        for path in (root / folder).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name in {"Patch", "SharedPatch", "SeamMissing"}
    }
    home = "core/tether/capture/patching.py"
    assert defined == {f"{home}:Patch", f"{home}:SharedPatch", f"{home}:SeamMissing"}
    assert instrument.Patch is patching.Patch


def test_a_seam_names_the_installed_version_what_moved_and_who_needs_updating() -> None:
    import importlib.metadata

    import pluggy

    from tether.capture.patching import Seam, SeamMissing

    seam = Seam("pluggy", "tether.plugin.manager")
    version = importlib.metadata.version("pluggy")
    seam.require(pluggy.PluginManager, "register", "add_hookspecs")  # present: nothing raised
    seam.require_parameters(pluggy.PluginManager.register, "plugin", "name")
    with pytest.raises(SeamMissing) as missing:
        seam.require(pluggy.PluginManager, "register", "_no_such_field")
    assert str(missing.value) == (
        f"pluggy {version}: pluggy._manager.PluginManager has no _no_such_field; tether.plugin.manager needs "
        f"updating for this release, or pin pluggy to a version it supports"
    )
    with pytest.raises(SeamMissing, match=rf"pluggy {version}: .*PluginManager\.register\(.* takes no renamed"):
        seam.require_parameters(pluggy.PluginManager.register, "plugin", "renamed")
    with pytest.raises(SeamMissing, match=r"^no-such-dist \?: pluggy has no gone"):
        Seam("no-such-dist", "x").require(pluggy, "gone")
