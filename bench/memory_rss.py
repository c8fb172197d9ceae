"""Memory of a long run on a ``memory:`` store: the process's RSS over many rollouts of the embedded model.

Run: ``.venv/bin/python bench/memory_rss.py [--rollouts 10000] [--keep 1000] [--batch 200]``
(needs ``tether[embedded,openai]``). The default is 2,000 rollouts; ``--rollouts 10000`` is the 10⁴ run.

A plain OpenAI-client agent answers each task with one call to the embedded model (``preset="nano"``, 8 new
tokens at temperature 1) through the real proxy, runner and span batcher, in batches of ``--batch`` rollouts,
exactly as ``fit`` runs a step (``Session.run_batch``: the rollouts stay in the store). The memory store keeps
the latest ``--keep`` finished rollouts (``memory:?keep_rollouts=N``); ``--keep all`` keeps every one, for
comparison. RSS (``/proc/self/status`` VmRSS) is printed after each tenth of the run; with a window it should
stop growing once the window is full.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import openai

import tether
from tether.models.embedded import create_embedded
from tether.types import Mode

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)


def answer(task: str) -> str:
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run(rollouts: int, keep: str, batch: int, model_dir: Path) -> list[tuple[int, float, int]]:
    """(rollouts run, RSS MiB, rollouts held by the store) after each tenth of the run."""
    agent = tether.wrap(answer, reward=lambda task, out: float(len(out) % 2))
    trainer = tether.Trainer(
        model=f"embedded:{model_dir}",
        store=f"memory:?keep_rollouts={keep}",
        n_runners=16,
        sampling={"max_tokens": 8, "temperature": 1.0},
        progress=False,
    )
    points: list[tuple[int, float, int]] = [(0, _rss_mib(), 0)]
    every = max(rollouts // 10, batch)
    async with trainer.session(agent) as session:
        done = 0
        while done < rollouts:
            n = min(batch, rollouts - done)
            await session.run_batch([f"task {done + i}" for i in range(n)], 1, mode=Mode.TRAIN)
            done += n
            if done % every < batch or done == rollouts:
                held = len(await session.store.list_rollouts())
                points.append((done, _rss_mib(), held))
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=2000, help="rollouts in all (10000 for the 10^4 run)")
    parser.add_argument("--keep", default="1000", help="the memory store's keep_rollouts (or 'all')")
    parser.add_argument("--batch", type=int, default=200, help="rollouts per batch (a training step)")
    args = parser.parse_args()
    model_dir = Path(f"/tmp/tether-bench-rss-{args.keep}")
    create_embedded(["task 12 answer"], preset="nano", seed=0).save(model_dir)
    started = time.perf_counter()
    points = asyncio.run(run(args.rollouts, args.keep, args.batch, model_dir))
    seconds = time.perf_counter() - started
    print(f"memory store, keep_rollouts={args.keep}: {args.rollouts} rollouts in {seconds:.0f} s")
    print(f"{'rollouts':>9} {'RSS MiB':>9} {'held':>6}")
    for done, rss, held in points:
        print(f"{done:>9} {rss:>9.1f} {held:>6}")
    first_full = (
        next((rss for done, rss, _ in points if done >= 2 * int(args.keep)), None) if args.keep != "all" else None
    )
    if first_full is not None:
        print(f"RSS growth after the window filled twice: {points[-1][1] - first_full:+.1f} MiB")


if __name__ == "__main__":
    main()
