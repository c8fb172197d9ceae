"""The CPU time a training script spends in the local sampler: runs the script (an example's ``train.py`` and
its flags) in this process with ``tether.models.local._sampling.generate`` timed by the CPU time of the thread it
runs on, and prints the sampler's CPU seconds, the prompt and sampled tokens it was given and drew, the process's
CPU seconds, and the evaluation and training rollouts of the run.

    python bench/sampling_cpu.py [--kv-cache-off] examples/calc_autogen/train.py --quick --run-dir /tmp/x

``--kv-cache-off`` runs it with the KV cache across turns off (a budget of 0), for the same run's tokens (the
cache changes none) at the cost without it.

Works on any checkout whose sampler is ``generate`` in ``tether.models.local._sampling`` (run it with that
checkout's ``core`` first on ``PYTHONPATH`` to measure it), so a branch and its base can be compared with one
command.
"""

from __future__ import annotations

import json
import resource
import runpy
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    kv_off = sys.argv[1:2] == ["--kv-cache-off"]
    if kv_off:
        del sys.argv[1]
    if len(sys.argv) < 2 or not sys.argv[1].endswith(".py"):
        raise SystemExit(__doc__)
    from tether.models.local import _sampling

    if kv_off:  # the backends' default budget, read when they are built: 0 turns the cache off
        from tether.models.local import _kv_cache

        _kv_cache.DEFAULT_BUDGET_BYTES = 0

    spent = [0.0, 0, 0, 0]  # CPU seconds, batches, prompt tokens, sampled tokens
    original = _sampling.generate

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        samples = original(*args, **kwargs)
        spent[0] += time.thread_time() - start
        spent[1] += 1
        spent[2] += sum(len(p) for p in args[2])
        spent[3] += sum(len(s.token_ids) for s in samples)
        return samples

    _sampling.generate = timed  # before the backends import it by name
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, str(Path(script).resolve().parent))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        per_token = 1000 * spent[0] / max(1, spent[3])
        print(f"\nsampler: {spent[0]:.1f} CPU-s in {spent[1]} batches, {per_token:.2f} CPU-ms per sampled token")
        print(f"sampler: {spent[2]} prompt tokens, {spent[3]} sampled tokens")
        print(f"process: {usage.ru_utime + usage.ru_stime:.1f} CPU-s")
        _rollouts(sys.argv)


def _rollouts(argv: list[str]) -> None:
    """The evaluation and training rollouts the run's metrics record (when ``--run-dir`` names where)."""
    if "--run-dir" not in argv:
        return
    for path in Path(argv[argv.index("--run-dir") + 1]).rglob("metrics.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        evals = [r for r in records if r.get("kind") == "eval"]
        passes = sum(len(r.get("greedy_rewards", [])) + len(r.get("sampled_rewards", [])) for r in evals)
        train = sum(int(r.get("rollouts", 0)) for r in records if r.get("kind") == "train")
        print(f"{path}: {len(evals)} evaluations, {passes} evaluation rollouts, {train} training rollouts")


if __name__ == "__main__":
    main()
