"""What training the demo agents costs, against the machine's own matmul peak (issue 36): sampling and update
tokens per second, achieved GFLOPS and their fraction of a torch matmul's, packed against per-call updates,
update tokens per rollout, and where the rest of an update's time goes (cProfile).

Run: ``.venv/bin/python bench/train_cost.py`` (under a minute of CPU on one thread; ``--help`` for knobs).
``--agents calc,room,sql`` adds the SQL example (``pip install -e ".[langgraph]"``; its nodes as its warm start
wraps them, ``write_query`` and ``rewrite_query`` optimized, ``check_query`` served).

For each agent (``examples/calc_autogen``: the AutoGen calculator; ``examples/room_openai``: the plain-openai
room booker, two tool calls then a booking): its scripted teacher (the examples' stand-in for an API model,
``tether.testing.fake_llm``) runs ``--rollouts`` rollouts through the unchanged agent (``Trainer.dev``); a
fresh embedded student (``--preset``, its tokenizer fitted to that traffic, as ``tether.WarmStart`` does)
renders their calls with its chat template (``sft_data.tokenize``), which is what a student that learned the
job sends and samples. Then, at ``--threads`` torch threads:

- **peak**: a square fp32 and a bf16 ``torch.matmul`` (``--matmul`` wide), 2·n³ FLOPs each.
- **sampling**: the student answers the rollouts' first prompts (``--groups`` of them, ``n=--group-size`` each,
  temperature 1, at most 48 new tokens) through ``backend.chat``; FLOPs ≈ 2·P·(prompt + generated tokens), a
  request's prompt counted once (its ``n`` rows share it: the sampler prefills it once) and every generated
  token (P: the model's parameters, the output head's included; attention's own FLOPs left out).
- **update**: one ``GRPO.update`` on every call of the rollouts (advantages ±1 by rollout) per call
  (``pack=False, share_prefix=False``: the baseline), packed (``pack=True``) and packed with each micro-batch's
  common prompt prefix computed once (``share_prefix=True``, the default), the same weights each time; FLOPs ≈
  6·P·tokens the forward passes compute (forward 2·P, backward 4·P per token); update tokens per rollout for
  each, and their ratios to the baseline.
- ``--model smollm2``: SmolLM2-135M-Instruct as the student instead (its own template; all weights, fp32 update),
  with e.g. ``--rollouts 8 --repeats 1``: minutes per update on one core.
- **profile**: the packed update under cProfile, and sampling (a fresh student, every thread it starts), the top
  ``--top`` functions by own time each.

GFLOPS are per CPU-second of this process (``time.process_time``: a busy shared machine stretches wall time,
not the work done), so with one thread they compare directly with the matmul's.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import dataclasses
import importlib
import io
import json
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

import tether
from tether.algorithms import batching
from tether.algorithms.grpo import GRPO
from tether.algorithms.sft import _steps, _transition
from tether.algorithms.sft_data import Filter, read_finished, select, tokenize
from tether.models import ChatRequest
from tether.models.embedded import EmbeddedBackend
from tether.store import open_store
from tether.training.signal import packing
from tether.types import Transition

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


# -- the examples, imported as their scripts do -----------------------------------------------------------------


@contextmanager
def _example(folder: str, names: Sequence[str]) -> Iterator[dict[str, ModuleType]]:
    """The example's modules (``import data`` from its folder), taken out of ``sys.modules`` again after (the
    examples share module names)."""
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.path.insert(0, str(EXAMPLES / folder))
    try:
        yield {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(EXAMPLES / folder))
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def _calc(n: int, seed: int) -> tuple[Any, Any, list[Any]]:
    """(teacher, wrapped agent, tasks) of examples/calc_autogen."""
    with _example("calc_autogen", ("data", "agent", "train")) as m:
        data, train = m["data"], m["train"]
        problems = data.splits(n_train=n, n_val=0, n_test=0, seed=seed)["train"]
        teacher = train.scripted_teacher(problems, data.demo_accuracy("0.4"), seed)
        return teacher, tether.wrap(m["agent"].agent, reward=data.reward), [p.task() for p in problems]


def _room(n: int, seed: int) -> tuple[Any, Any, list[Any]]:
    """(teacher, wrapped agent, tasks) of examples/room_openai."""
    with _example("room_openai", ("offices", "data", "agent", "train")) as m:
        data, train, agent = m["data"], m["train"], m["agent"]
        requests = data.splits(n_train=n, n_val=0, n_test=0, seed=seed)["train"]
        teacher = train.scripted_teacher(agent, requests, 0.4, seed)
        run = train.prompt_runner(agent.SYSTEM_PROMPT)
        return teacher, tether.wrap(agent.book_meeting, reward=data.reward, run=run), [r.task() for r in requests]


def _sql(n: int, seed: int) -> tuple[Any, Any, list[Any]]:
    """(teacher, wrapped agent, tasks) of examples/sql_langgraph (needs the langgraph extra), its nodes as its
    warm start wraps them."""
    from tether.testing.fake_llm import FakeLLM

    with _example("sql_langgraph", ("shop", "data", "agent", "checker_probe", "train")) as m:
        data, train, agent = m["data"], m["train"], m["agent"]
        questions = data.splits(n_train=n, n_val=0, n_test=0, seed=seed)["train"]
        knobs = argparse.Namespace(seed=seed, demo_accuracy=0.25, demo_typos=0.25, demo_check_noise=0.0)
        teacher = FakeLLM(handler=train.demonstrator(agent, questions, knobs))
        wrapped = tether.wrap(agent.graph, reward=data.reward, optimize=train.OPTIMIZE)
        return teacher, wrapped, [q.task() for q in questions]


AGENTS: dict[str, Callable[[int, int], tuple[Any, Any, list[Any]]]] = {"calc": _calc, "room": _room, "sql": _sql}


# -- the data: teacher rollouts rendered by the student's template ----------------------------------------------


def rollouts(agent: str, n: int, seed: int, folder: Path) -> list[Any]:
    """``n`` finished teacher rollouts of ``agent`` with their spans."""
    teacher, wrapped, tasks = AGENTS[agent](n, seed)
    url = f"sqlite:///{folder / f'{agent}.db'}"
    with teacher:
        tether.Trainer(model=teacher.base_url, store=url, progress=False, n_runners=16).dev(wrapped, tasks)

    async def read() -> list[Any]:
        store = open_store(url)
        try:
            return await read_finished(store)
        finally:
            await store.close()

    return asyncio.run(read())


def student(items: Sequence[Any], args: argparse.Namespace, folder: Path) -> Any:
    """A fresh embedded model whose tokenizer is fitted to the rollouts' text (``WarmStart``'s refit), or
    (``--model smollm2``) SmolLM2-135M-Instruct converted into ``folder``, all its weights trained."""
    if args.model == "smollm2":
        from tether.models import open_backend, smollm2

        return open_backend(f"hf:{smollm2.checkpoint(folder / 'smollm2')}?threads={args.threads}")
    backend = EmbeddedBackend(preset=args.preset, seed=0, threads=args.threads)
    corpus: list[str] = []
    for e in select(items, Filter()).examples:
        corpus.extend(str(m.get("content") or "") for m in e.messages)
        corpus.append(json.dumps(e.tools) if e.tools else "")
        corpus.append(json.dumps(e.reply))
    backend.refit_tokenizer(corpus)
    return backend


def calls(items: Sequence[Any], backend: Any) -> tuple[list[Transition], list[tuple[Any, Any]]]:
    """Every call of the rollouts, tokenized with the student's template, advantages ±1 by rollout; and each
    rollout's first request (messages, tools)."""
    examples = select(items, Filter()).examples
    tokenize(examples, backend, retokenize=True)
    steps = _steps(examples)
    rows = [_transition(e, "default", k) for e, k in zip(examples, steps, strict=True)]
    sign = {r: (-1.0) ** i for i, r in enumerate(dict.fromkeys(t.rollout_id for t in rows))}
    firsts = [(e.messages, e.tools) for e, k in zip(examples, steps, strict=True) if k == 0]
    return [dataclasses.replace(t, advantage=sign[t.rollout_id]) for t in rows], firsts


# -- the measurements --------------------------------------------------------------------------------------------


def _cpu(work: Callable[[], Any]) -> tuple[float, Any]:
    start = time.process_time()
    out = work()
    return time.process_time() - start, out


def matmul_gflops(n: int, dtype: torch.dtype, repeats: int = 3) -> float:
    """The best of ``repeats`` n×n @ n×n products, in GFLOPS per CPU-second."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.matmul(a, b)  # warm-up
    best = min(_cpu(lambda: torch.matmul(a, b))[0] for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def sampling(backend: Any, firsts: Sequence[tuple[Any, Any]], n: int) -> dict[str, float]:
    """The student sampling ``n`` answers to each first request."""

    async def run() -> tuple[int, int]:
        prompt = generated = 0
        for messages, tools in firsts:
            request = ChatRequest(messages=messages, tools=tools, n=n, max_tokens=48, temperature=1.0)
            result = await backend.chat(request)
            prompt += len(result.prompt_token_ids or [])  # (the sampler prefills a prompt its rows share once)
            generated += sum(len(c.response_token_ids or []) for c in result.choices)
        return prompt, generated

    seconds, (prompt, generated) = _cpu(lambda: asyncio.run(run()))
    return {"seconds": seconds, "prompt": prompt, "generated": generated}


def update(
    model: torch.nn.Module, rows: Sequence[Transition], pack: bool, pad: int, repeats: int, micro: int, share: bool
) -> tuple[float, dict[str, float]]:
    """The best of ``repeats`` GRPO updates on ``rows``, each on a copy of ``model`` (the same weights)."""
    runs = []
    for _ in range(repeats):
        fresh = copy.deepcopy(model)
        algo = GRPO(group_size=2, lr=1e-6, pack=pack, share_prefix=share, max_row_drift=None, micro_batch=micro)
        runs.append(_cpu(lambda algo=algo, fresh=fresh: algo.update(fresh, rows, pad_token_id=pad)))
    return min(runs, key=lambda run: run[0])


def profile(model: torch.nn.Module, rows: Sequence[Transition], pad: int, top: int, micro: int) -> str:
    """The packed update under cProfile: the top functions by own time."""
    fresh = copy.deepcopy(model)
    algo = GRPO(group_size=2, lr=1e-6, max_row_drift=None, micro_batch=micro)
    profiler = cProfile.Profile()
    profiler.runcall(algo.update, fresh, rows, pad_token_id=pad)
    return _top([profiler], top)


def sampling_profile(backend: Any, firsts: Sequence[tuple[Any, Any]], n: int, top: int) -> str:
    """Sampling under cProfile: the backend samples on its own thread, so every thread started from here on
    (its sampler's first of all: ``backend`` must not have sampled yet) runs under a profiler of its own."""
    profilers: list[cProfile.Profile] = []

    def start(frame: Any, event: str, arg: Any) -> None:
        sys.setprofile(None)
        profilers.append(cProfile.Profile())
        profilers[-1].enable()

    threading.setprofile(start)
    try:
        sampling(backend, firsts, n)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        asyncio.run(backend.close())  # its threads end: their profiles are complete
    return _top(profilers, top)


def _top(profilers: Sequence[cProfile.Profile], top: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profilers[0], stream=out)
    for more in profilers[1:]:
        stats.add(more)
    stats.sort_stats("tottime").print_stats(top)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("ncalls"))
    return "\n".join(line.replace(str(Path(sys.prefix)), "<venv>") for line in lines[start : start + top + 1])


def _padded(rows: Sequence[Transition], pack: bool, model: torch.nn.Module, micro: int, share: bool) -> int:
    """The tokens GRPO's micro-batches hold with their padding (rows × each micro-batch's longest row)."""
    sequences = packing.pack_calls(rows, batching.context_length(model), merge=pack)
    lengths = [len(q.token_ids) for q in sequences]
    parts = batching.micro_batches(sequences, micro, None, share)
    return sum(len(part) * max(lengths[i] for i in part) for part in parts)


def _of(gflops: float, peak: dict[str, float]) -> str:
    return f"{gflops / peak['fp32']:.0%} of the fp32 matmul ({gflops / peak['bf16']:.0%} of bf16)"


# -- the report --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", default="calc,room", help="comma-separated: calc, room, sql")
    parser.add_argument("--rollouts", type=int, default=64, help="teacher rollouts per agent (one update)")
    parser.add_argument("--preset", default="tiny", help="the embedded student's size (tether demo's: tiny)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (sampling, update, matmul)")
    parser.add_argument("--matmul", type=int, default=1024, help="side of the square peak matmul")
    parser.add_argument("--groups", type=int, default=8, help="prompts sampled (sampling figure)")
    parser.add_argument("--group-size", type=int, default=8, help="samples per prompt")
    parser.add_argument("--top", type=int, default=12, help="functions listed from the profile")
    parser.add_argument("--no-sampling", action="store_true", help="skip the sampling figure")
    parser.add_argument("--repeats", type=int, default=3, help="updates per variant (the best counts)")
    parser.add_argument("--micro-batch", type=int, default=32, help="GRPO's rows per micro-batch")
    parser.add_argument(
        "--model",
        choices=("embedded", "smollm2"),
        default="embedded",
        help="the student: a fresh embedded model, or SmolLM2-135M-Instruct (all weights; minutes per update)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"torch {torch.__version__}, {args.threads} thread(s), {when}")
    peak = {
        name: matmul_gflops(args.matmul, dtype)
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }
    print(f"matmul peak ({args.matmul}²): fp32 {peak['fp32']:.1f} GFLOPS, bf16 {peak['bf16']:.1f} GFLOPS")
    with tempfile.TemporaryDirectory(prefix="tether-train-cost-") as tmp:
        for agent in args.agents.split(","):
            report(agent.strip(), args, peak, Path(tmp))
    return 0


def report(agent: str, args: argparse.Namespace, peak: dict[str, float], folder: Path) -> None:
    items = rollouts(agent, args.rollouts, 0, folder)
    backend = student(items, args, folder)
    rows, firsts = calls(items, backend)
    model, pad = backend.model, backend.pad_token_id
    params = sum(p.numel() for p in model.parameters())
    n = len({t.rollout_id for t in rows})
    print(
        f"\n== {agent}: {n} rollouts, {len(rows)} calls ({len(rows) / max(n, 1):.2f} per rollout), "
        f"student {args.preset if args.model == 'embedded' else args.model} P = {params / 1e6:.2f} M parameters"
    )
    if not args.no_sampling:
        s = sampling(backend, firsts[: args.groups], args.group_size)
        flops = 2 * params * (s["prompt"] + s["generated"])
        gflops = flops / s["seconds"] / 1e9
        print(
            f"sampling: {s['generated'] / s['seconds']:.0f} generated tokens/s ({s['prompt']} prompt + "
            f"{s['generated']} generated tokens in {s['seconds']:.1f} CPU-s), {gflops:.1f} GFLOPS = "
            f"{_of(gflops, peak)}"
        )
    results = {}
    for name, pack, share in (("per-call", False, False), ("packed  ", True, False), ("shared  ", True, True)):
        seconds, metrics = update(model, rows, pack, pad, args.repeats, args.micro_batch, share)
        results[name.strip()] = (seconds, metrics)
        tokens = metrics["tokens_computed"]
        gflops = 6 * params * tokens / seconds / 1e9
        padded = _padded(rows, pack, model, args.micro_batch, share)
        print(
            f"update {name}: {metrics['sequences']:.0f} sequences, "
            f"{tokens:.0f} tokens ({tokens / n:.0f} per rollout; {padded} with padding before sharing; "
            f"{metrics['tokens_trained']:.0f} trained), {seconds:.2f} CPU-s, {tokens / seconds:.0f} tokens/s, "
            f"{gflops:.1f} GFLOPS = {_of(gflops, peak)}"
        )
    base_s, base = results["per-call"]
    for name in ("packed", "shared"):
        seconds, metrics = results[name]
        ratio = base["tokens_computed"] / metrics["tokens_computed"]
        print(
            f"{name} vs per-call: update tokens per rollout ÷{ratio:.2f}"
            f", update CPU time ÷{base_s / seconds:.2f}, loss {metrics['loss']:.7g} vs {base['loss']:.7g}"
        )
    if args.top:
        print(f"profile of the packed update (top {args.top} by own time):")
        print(profile(model, rows, pad, args.top, args.micro_batch))
    if args.top and not args.no_sampling:
        print(f"profile of sampling, a fresh student, every thread (top {args.top} by own time):")
        print(sampling_profile(student(items, args, folder), firsts[: args.groups], args.group_size, args.top))
    asyncio.run(backend.close())


if __name__ == "__main__":
    sys.exit(main())
