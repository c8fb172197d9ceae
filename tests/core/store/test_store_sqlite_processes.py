"""The SQLite store across processes: a SIGKILLed writer loses nothing it committed, and workers in
different processes dequeuing from one file never get the same rollout."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from tether.store.sqlite import SqliteStore
from tether.testing.store_conformance import spec

# Writes forever: one rollout per round (enqueue, dequeue, a batch of spans, finish every other one),
# printing what it committed after each call returns.
_WRITER = """
import asyncio, json, sys
from tether.store.sqlite import SqliteStore
from tether.testing.store_conformance import span, spec

async def main():
    store = SqliteStore(sys.argv[1])
    i = 0
    while True:
        await store.enqueue([spec(i, max_attempts=2, heartbeat_timeout_s=60)])
        ((rollout, attempt),) = await store.dequeue("writer")
        rid, aid = rollout.rollout_id, attempt.attempt_id
        await store.add_spans([span(rid, aid, f"s{j}", attributes={"i": i, "j": j}) for j in range(20)])
        record = {"rollout": rollout.rollout_id, "attempt": attempt.attempt_id, "spans": 20, "finished": False}
        if i % 2:
            await store.finish_attempt(attempt.attempt_id, "succeeded", reward=float(i), output={"i": i})
            record["finished"] = True
        print(json.dumps(record), flush=True)
        i += 1

asyncio.run(main())
"""

# Says it is ready, waits for "go", then dequeues one rollout at a time until the queue is empty; prints
# the ids it got.
_DEQUEUER = """
import asyncio, json, sys
from tether.store.sqlite import SqliteStore

async def main():
    store = SqliteStore(sys.argv[1])
    print("ready", flush=True)
    sys.stdin.readline()
    got = []
    while claimed := await store.dequeue(sys.argv[2]):
        got += [r.rollout_id for r, _ in claimed]
    print(json.dumps(got), flush=True)

asyncio.run(main())
"""


async def test_sigkilled_writer_loses_nothing_committed(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
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

    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    store = SqliteStore(path)
    for i, record in enumerate(records):
        rollout = await store.get_rollout(record["rollout"])
        spans = await store.get_spans(record["attempt"])
        assert [s.sequence for s in spans] == list(range(20))
        assert [s.attributes for s in spans] == [{"i": i, "j": j} for j in range(20)]
        if record["finished"]:
            assert (rollout.status.value, rollout.reward, rollout.output) == ("succeeded", float(i), {"i": i})
        else:
            assert rollout.status.value in ("running", "succeeded")
    # the file is fully usable afterwards: the killed worker's attempts can be timed out and retried
    running = [r for r in await store.list_rollouts() if r.status.value == "running"]
    assert running
    stale = await store.requeue_stale(now=1e12)
    assert sorted(stale) == sorted(r.rollout_id for r in running)
    assert {(await store.get_rollout(rid)).status.value for rid in stale} == {"queued"}
    await store.close()


async def test_two_processes_never_dequeue_the_same_rollout(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    store = SqliteStore(path)
    rollouts = await store.enqueue([spec(i) for i in range(600)])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _DEQUEUER, str(path), f"proc{n}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    # this process dequeues too, at the same time
    mine = []
    while claimed := await store.dequeue("parent"):
        mine += [r.rollout_id for r, _ in claimed]
    results = [mine]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    claimed_ids = [rid for got in results for rid in got]
    assert len(claimed_ids) == len(set(claimed_ids)) == 600
    assert set(claimed_ids) == {r.rollout_id for r in rollouts}
    for rollout in await store.list_rollouts():
        attempts = await store.get_attempts(rollout.rollout_id)
        assert len(attempts) == 1 and attempts[0].worker_id in ("parent", "proc0", "proc1")
    await store.close()
