"""Issue 37 item 3: spans waiting for their batch are written when the process is asked to end: on SIGTERM, on
SIGINT, and when the program's main coroutine returns without closing the batcher. A real process writing to a
real SQLite file; the parent reads the file after the process ended."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tether.store.sqlite import SqliteStore

_SCRIPT = """
import asyncio, signal, sys
# Ctrl-C as a terminal delivers it: a process started in the background by a non-interactive shell (a CI job
# under `... &`) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler
signal.signal(signal.SIGINT, signal.default_int_handler)
from tether.capture.span_batcher import SpanBatcher
from tether.store.sqlite import SqliteStore
from tether.types import RolloutSpec, Span, SpanKind

async def main(path, then):
    store = SqliteStore(path)
    (rollout,) = await store.enqueue([RolloutSpec(input="q")])
    ((_, attempt),) = await store.dequeue("w", limit=1)
    batcher = SpanBatcher(store, max_delay_s=3600)  # never writes by itself: only a flush does
    for i in range(50):
        batcher.submit_deferred(lambda i=i: Span(attempt.rollout_id, attempt.attempt_id, SpanKind.OTHER, f"s{i}"))
    print(attempt.attempt_id, flush=True)
    if then == "wait":
        await asyncio.sleep(60)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


#: as ``Trainer.fit`` and ``dev`` run: the loop on tether's thread (``tether._loop``), the main thread waiting
_SYNC_SCRIPT = _SCRIPT.replace(
    "asyncio.run(main(sys.argv[1], sys.argv[2]))",
    "from tether._loop import run_sync\n"
    "from tether.capture.span_batcher import install_sigterm_flush\n"
    "install_sigterm_flush()\n"
    "run_sync(main(sys.argv[1], sys.argv[2]))",
)


def _run(path: Path, then: str, sig: signal.Signals | None, script: str = _SCRIPT) -> tuple[str, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(path), then], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    attempt_id = proc.stdout.readline().strip()
    assert attempt_id, proc.stderr.read() if proc.stderr else ""
    if sig is not None:
        proc.send_signal(sig)
    return attempt_id, proc.wait(timeout=60)


async def _stored(path: Path, attempt_id: str) -> int:
    store = SqliteStore(path)
    try:
        return len(await store.get_spans(attempt_id))
    finally:
        await store.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_pending_spans_are_written_when_the_process_is_signalled(tmp_path: Path, sig: signal.Signals) -> None:
    path = tmp_path / "s.db"
    attempt_id, code = _run(path, "wait", sig)
    assert asyncio.run(_stored(path, attempt_id)) == 50
    if sig == signal.SIGTERM:
        assert code == -signal.SIGTERM  # it still ends as SIGTERM ends it


def test_pending_spans_are_written_when_main_returns_without_closing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    attempt_id, code = _run(path, "return", None)
    assert code == 0
    assert asyncio.run(_stored(path, attempt_id)) == 50


def test_pending_spans_are_written_on_sigterm_when_the_loop_runs_on_tethers_thread(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    attempt_id, code = _run(path, "wait", signal.SIGTERM, _SYNC_SCRIPT)
    assert code == -signal.SIGTERM
    assert asyncio.run(_stored(path, attempt_id)) == 50
