"""The ``tether`` command, run for real: ``tether store serve`` as a subprocess talked to with HttpStore,
and ``tether plugins``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tether.store.errors import InvalidInput
from tether.store.http.client import HttpStore, StoreUnauthorized
from tether.testing.store_conformance import span, spec
from tether.types import AttemptStatus, RolloutStatus


def _tether(*args: str) -> list[str]:
    script = Path(sys.executable).parent / "tether"
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "from tether.cli import main; main()", *args]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE_TOKEN"}
    return {**env, "COLUMNS": "200", "PYTHONUNBUFFERED": "1", **extra}


@contextmanager
def _serving(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen, str]]:
    """Start ``tether store serve --port 0 ...`` and yield the URL it prints, the process and the line that
    said so, then stop it with SIGTERM."""
    proc = subprocess.Popen(
        _tether("store", "serve", "--port", "0", *args),
        cwd=cwd,
        env=env or _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server listens (or the process dies)
        if "serving at " not in line:
            proc.kill()
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"tether store serve did not start: {line!r} {err}")
        yield line.rsplit("serving at ", 1)[1].strip(), proc, line
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _stop(proc: subprocess.Popen) -> str:
    """Stop the server; its stdout and stderr since the first line."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    return out + err


async def test_store_serve_sqlite_round_trip_and_restart(tmp_path: Path) -> None:
    with _serving("--store", "sqlite:///runs/x.db", cwd=tmp_path) as (url, proc, _):
        assert url.startswith("http://127.0.0.1:")
        store = HttpStore(url)
        assert (await store.health())["store"] == "SqliteStore"
        (queued, other) = await store.enqueue([spec(1), spec(2)])
        ((rollout, attempt),) = await store.dequeue("w1")
        assert rollout.rollout_id == queued.rollout_id
        assert await store.add_spans(
            [span(rollout.rollout_id, attempt.attempt_id, f"s{i}") for i in range(3)]
        ) == [
            0,
            1,
            2,
        ]
        await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=1.0, output="ok")
        await store.close()
        assert "stopped" in _stop(proc)
    assert (tmp_path / "runs" / "x.db").exists()  # relative to where the command ran

    # a new server on the same file sees everything the first one stored
    with _serving("--store", "sqlite:///runs/x.db", cwd=tmp_path) as (url, _, _):
        store = HttpStore(url)
        done = await store.get_rollout(rollout.rollout_id)
        assert (done.status, done.reward, done.output) == (RolloutStatus.SUCCEEDED, 1.0, "ok")
        assert [s.name for s in await store.get_spans(attempt.attempt_id)] == ["s0", "s1", "s2"]
        assert (await store.get_rollout(other.rollout_id)).status == RolloutStatus.QUEUED
        await store.close()


async def test_store_serve_with_token_from_the_environment(tmp_path: Path) -> None:
    with _serving("--store", "memory:", cwd=tmp_path, env=_env(TETHER_STORE_TOKEN="tok")) as (url, _, _):
        anonymous = HttpStore(url, token="")
        with pytest.raises(StoreUnauthorized):
            await anonymous.list_rollouts()
        await anonymous.close()
        store = HttpStore(url, token="tok")
        assert await store.list_rollouts() == []
        await store.close()


def test_store_serve_refuses_public_bind_without_token(tmp_path: Path) -> None:
    result = subprocess.run(
        _tether("store", "serve", "--store", "memory:", "--host", "0.0.0.0", "--port", "0"),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "--token" in result.stderr and "TETHER_STORE_TOKEN" in result.stderr
    assert "Traceback" not in result.stderr


def test_store_serve_bad_store_url(tmp_path: Path) -> None:
    result = subprocess.run(
        _tether("store", "serve", "--store", "nosuch://x", "--port", "0"),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "unknown store URL" in result.stderr
    assert "Traceback" not in result.stderr


def test_plugins_lists_loaded_and_unavailable_plugins() -> None:
    from tether.plugin.manager import build

    expected = build()  # the same environment as the command's
    result = subprocess.run(_tether("plugins"), env=_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "loaded plugins" in result.stdout and "adapters: " in result.stdout
    assert expected.loaded() or expected.unavailable, "no bundled plugin is installed as an entry point"
    for info in expected.loaded():
        assert info.name in result.stdout and all(hook in result.stdout for hook in info.hooks)
    for missing in expected.unavailable:
        assert missing.name in result.stdout and (missing.hint or "") in result.stdout


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_tether(*args), cwd=cwd, env=_env(), capture_output=True, text=True, timeout=60)


def test_store_serve_refuses_a_bad_port_without_a_traceback(tmp_path: Path) -> None:
    result = _run("store", "serve", "--store", "memory:", "--port", "99999", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "99999" in result.stderr and "0<=x<=65535" in result.stderr
    assert "Traceback" not in result.stderr


def test_store_serve_names_a_path_it_cannot_use(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a file, not a folder")
    for url, path in (
        ("sqlite:////proc/nope/x.db", "/proc/nope"),
        ("sqlite:///file/x.db", str(tmp_path / "file")),
    ):
        result = _run("store", "serve", "--store", url, "--port", "0", cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        assert "cannot open the SQLite store" in result.stderr and path in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_store_serve_hosts(tmp_path: Path) -> None:
    with _serving("--store", "memory:", "--host", "[::1]", cwd=tmp_path) as (url, _, _):
        assert url.startswith("http://[::1]:")
    result = _run(
        "store",
        "serve",
        "--store",
        "memory:",
        "--host",
        "no-such-host.invalid",
        "--token",
        "t",
        "--port",
        "0",
        cwd=tmp_path,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "no address for host 'no-such-host.invalid'" in result.stderr, result.stderr
    assert "Unknown error" not in result.stderr


async def test_store_serve_prints_the_file_it_serves(tmp_path: Path) -> None:
    with _serving("--store", "sqlite:///tmp/x.db", "--max-body-mb", "1", cwd=tmp_path) as (url, _, banner):
        store = HttpStore(url)
        (rollout,) = await store.enqueue([spec(1)])
        ((_, attempt),) = await store.dequeue("w")
        big = span(rollout.rollout_id, attempt.attempt_id, "big", attributes={"t": "x" * 2_000_000})
        with pytest.raises(InvalidInput, match="1048576 bytes"):
            await store.add_spans([big])
        await store.close()
    assert str(tmp_path / "tmp" / "x.db") in banner, banner  # relative to where it ran, and said so
    assert (tmp_path / "tmp" / "x.db").is_file()


def test_store_serve_says_which_store_it_made_by_default(tmp_path: Path) -> None:
    with _serving(cwd=tmp_path) as (_, proc, banner):
        out = _stop(proc)
    assert "no --store given: serving sqlite:///runs/tether.db" in out, out
    assert str(tmp_path / "runs" / "tether.db") in banner, banner
    assert (tmp_path / "runs" / "tether.db").is_file()


def test_store_serve_help_promises_only_what_exists(tmp_path: Path) -> None:
    result = _run("store", "serve", "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "--max-body-mb" in result.stdout
    # the help names the dashboard's pages, and they exist: the `dashboard` command answers too
    assert "/dashboard/" in result.stdout
    assert _run("dashboard", "--help", cwd=tmp_path).returncode == 0
