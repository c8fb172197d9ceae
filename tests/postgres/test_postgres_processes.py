"""The PostgreSQL store across processes and server trouble: 16 processes dequeuing one queue, a SIGKILLed
writer, a server restart mid-run, and ``tether store serve --store postgresql://...``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tether.store import StoreError
from tether.store.http.client import HttpStore
from tether.store.postgres import PostgresStore
from tether.testing.pg_server import TempPostgres
from tether.testing.store_conformance import span, spec
from tether.types import AttemptStatus, RolloutStatus

# Writes forever: one rollout per round (enqueue, dequeue, a batch of spans, finish every other one),
# printing what it committed after each call returns.
_WRITER = """
import asyncio, json, sys
from tether.store.postgres import PostgresStore
from tether.testing.store_conformance import span, spec

async def main():
    store = PostgresStore(sys.argv[1], pool_size=2)
    i = 0
    while True:
        await store.enqueue([spec(i, max_attempts=2, heartbeat_timeout_s=60)])
        ((rollout, attempt),) = await store.dequeue("writer")
        rid, aid = rollout.rollout_id, attempt.attempt_id
        await store.add_spans([span(rid, aid, f"s{j}", attributes={"i": i, "j": j}) for j in range(20)])
        record = {"rollout": rid, "attempt": aid, "finished": False}
        if i % 2:
            await store.finish_attempt(aid, "succeeded", reward=float(i), output={"i": i})
            record["finished"] = True
        print(json.dumps(record), flush=True)
        i += 1

asyncio.run(main())
"""

# Says it is ready, waits for "go", then dequeues until the queue is empty; prints the ids it got.
_DEQUEUER = """
import asyncio, json, sys
from tether.store.postgres import PostgresStore

async def main():
    store = PostgresStore(sys.argv[1], pool_size=1)
    await store.list_rollouts(limit=1)  # connected
    print("ready", flush=True)
    sys.stdin.readline()
    got = []
    while claimed := await store.dequeue(sys.argv[2], limit=int(sys.argv[3])):
        got += [r.rollout_id for r, _ in claimed]
    print(json.dumps(got), flush=True)
    await store.close()

asyncio.run(main())
"""


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


async def test_sixteen_processes_dequeue_each_rollout_once(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    rollouts = await store.enqueue([spec(i) for i in range(800)])
    procs = [_python(_DEQUEUER, pg_url, f"proc{n}", str(1 + n % 3)) for n in range(16)]
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == "ready", proc.stderr.read() if proc.stderr else ""
    for proc in procs:  # all at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    claimed = [rid for got in results for rid in got]
    assert len(claimed) == len(set(claimed)) == 800
    assert set(claimed) == {r.rollout_id for r in rollouts}
    assert sum(1 for got in results if got) > 1  # the work really was shared
    for rollout in await store.list_rollouts():
        assert rollout.status == RolloutStatus.RUNNING and rollout.attempt_count == 1
    await store.close()


async def test_sigkilled_writer_loses_nothing_acknowledged(pg_url: str) -> None:
    proc = _python(_WRITER, pg_url)
    records = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            records.append(json.loads(line))
            if len(records) == 40:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(records) == 40, proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == -signal.SIGKILL

    store = PostgresStore(pg_url)
    for i, record in enumerate(records):
        rollout = await store.get_rollout(record["rollout"])
        spans = await store.get_spans(record["attempt"])
        assert [s.sequence for s in spans] == list(range(20))
        assert [s.attributes for s in spans] == [{"i": i, "j": j} for j in range(20)]
        if record["finished"]:
            assert (rollout.status.value, rollout.reward, rollout.output) == ("succeeded", float(i), {"i": i})
        else:
            assert rollout.status.value in ("running", "succeeded")
    # the killed worker's attempts are timed out and retried like any dead worker's
    running = [r for r in await store.list_rollouts() if r.status == RolloutStatus.RUNNING]
    assert running
    stale = await store.requeue_stale(now=1e12)
    assert sorted(stale) == sorted(r.rollout_id for r in running)
    assert {(await store.get_rollout(rid)).status.value for rid in stale} == {"queued"}
    await store.close()


async def test_server_restart_mid_run_is_reported_then_recovered(pg_server: TempPostgres, pg_url: str) -> None:
    store = PostgresStore(pg_url)
    (first, second) = await store.enqueue([spec(1), spec(2)])
    ((rollout, attempt),) = await store.dequeue("w")
    await store.add_spans([span(rollout.rollout_id, attempt.attempt_id, "before")])
    waiting = await store.wait_for_rollouts([first.rollout_id], timeout=0.01)  # opens the listening connection
    assert waiting == []

    pg_server.stop()  # "fast": the server disconnects its clients
    with pytest.raises(StoreError, match=r"unreachable.*may not have been applied"):
        await store.add_spans([span(rollout.rollout_id, attempt.attempt_id, "during")])
    with pytest.raises(StoreError, match="unreachable"):
        await store.dequeue("w")
    pg_server.start()

    # the same store object works again: new connections, nothing committed lost, the failed calls not applied
    assert await store.add_spans([span(rollout.rollout_id, attempt.attempt_id, "after")]) == [1]
    assert [s.name for s in await store.get_spans(attempt.attempt_id)] == ["before", "after"]
    ((again, _),) = await store.dequeue("w")
    assert again.rollout_id == second.rollout_id
    await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED)
    done = await store.wait_for_rollouts([first.rollout_id], timeout=30)  # listens again after the restart
    assert [r.status for r in done] == [RolloutStatus.SUCCEEDED]
    await store.close()


def _tether(*args: str) -> list[str]:
    script = Path(sys.executable).parent / "tether"
    return [str(script), *args] if script.exists() else [sys.executable, "-m", "tether.cli", *args]


async def test_tether_store_serve_over_postgres(pg_url: str, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        _tether("store", "serve", "--store", pg_url, "--port", "0"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving at " in line, proc.stderr.read() if proc.stderr else ""
        client = HttpStore(line.rsplit("serving at ", 1)[1].strip())
        assert (await client.health())["store"] == "PostgresStore"
        (queued,) = await client.enqueue([spec(1)])
        ((rollout, attempt),) = await client.dequeue("w1")
        assert rollout.rollout_id == queued.rollout_id
        assert await client.add_spans(
            [span(rollout.rollout_id, attempt.attempt_id, f"s{i}") for i in range(3)]
        ) == [
            0,
            1,
            2,
        ]
        await client.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=1.0, output="ok")
        await client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0

    direct = PostgresStore(pg_url)  # what the server stored is in the database
    done = await direct.get_rollout(rollout.rollout_id)
    assert (done.status, done.reward, done.output) == (RolloutStatus.SUCCEEDED, 1.0, "ok")
    assert [s.name for s in await direct.get_spans(attempt.attempt_id)] == ["s0", "s1", "s2"]
    await direct.close()
