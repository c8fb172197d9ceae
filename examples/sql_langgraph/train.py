"""Train the LangGraph SQL agent with the embedded model on CPU, optimizing only two of its three nodes.

1. Warm start (``tether.WarmStart``, its own run ``<run-dir>/warmstart``, built once and shared by every
   GRPO run under ``--run-dir``): the unchanged agent runs against a teacher, here a scripted demonstrator
   standing in for your API model (it writes SQL in the right shape but leans to one sense of each pair —
   "less than 40" often becomes "more than 40" — sometimes misspells a column, and checks by a rule), and a
   fresh embedded model (its tokenizer fitted to the teacher's traffic) is fine-tuned on every captured call
   of those runs — ``write_query``, ``check_query`` and ``rewrite_query`` — in the agent's exact request format.
2. GRPO with ``tether.Trainer.fit``, ``optimize=["write_query", "rewrite_query"]``: ``check_query`` is served
   by the same model, and its transitions are captured but never trained. Held-out questions are
   evaluated before, during and after. A small learning rate over 16 questions a step: at 5e-4 over 8 the
   steps are noisy enough to undo the long queries the warm start taught (measured: the gain comes and goes).

Run: ``python examples/sql_langgraph/train.py`` (``--help`` lists the knobs).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import checker_probe  # noqa: E402
import data  # noqa: E402

import tether  # noqa: E402

OPTIMIZE = ["write_query", "rewrite_query"]
#: ``--policies two``: a policy with its own weights per key, each trained on its own reward
POLICIES = {"writer": ["write_query", "rewrite_query"], "checker": ["check_query"]}


def policy_rewards(task: dict[str, Any], output: Any) -> dict[str, float]:
    """``--policies two``: the writer is scored on execution match, the checker on its verdicts."""
    return {"writer": data.reward(task, output), "checker": data.checker_reward(task, output)}


def demonstrator(agent_module: Any, questions: list[data.Question], args: argparse.Namespace) -> Any:
    """A FakeLLM handler playing the imperfect demonstrator for each of the agent's nodes (told apart by
    their system prompts). The k-th time it is asked one exact request it answers from the seed
    ``<seed>:<k>:<request>``: the teacher's runs over the same question differ (the ``--demo-passes``), and
    the demonstrations are the same set however the concurrent rollouts interleave."""
    from tether.testing.fake_llm import text

    by_text = {q.text: q for q in questions}
    node_of = {
        agent_module.WRITE_PROMPT: "write",
        agent_module.CHECK_PROMPT: "check",
        agent_module.REWRITE_PROMPT: "rewrite",
    }
    asked: dict[tuple[str, str], int] = {}
    lock = threading.Lock()

    def handler(request: dict[str, Any]) -> Any:
        system, user = (str(m.get("content")) for m in request["messages"][:2])
        node = node_of.get(system)
        question = by_text.get(user.split("\n", 1)[0])
        if node is None or question is None:
            raise RuntimeError(f"the demonstrator does not know this request: {request['messages']}")
        with lock:
            k = asked.get((system, user), 0)
            asked[(system, user)] = k + 1
        rng = random.Random(f"{args.seed}:{k}:{user}")
        if node == "write":
            return text(data.demo_write(question, rng, args.demo_accuracy, args.demo_typos))
        if node == "rewrite":
            return text(data.demo_rewrite(question, rng, args.demo_accuracy))
        sql = re.search(r"^SQL: (.*)$", user, re.MULTILINE)
        return text(data.demo_check(sql.group(1) if sql else "", rng, args.demo_check_noise))

    return handler


def warm_start(
    agent_module: Any, run_dir: Path, questions: list[data.Question], args: argparse.Namespace
) -> tuple[Path, float]:
    """The warm-started checkpoint and the demonstrations' accuracy: ``tether.WarmStart`` in its own run,
    ``<run-dir>/warmstart``, built once, then the start of every GRPO run under ``--run-dir`` (each
    ``--policies`` mode starts from the same weights; with ``--policies checker`` the frozen writer is it)."""
    from tether.models.embedded import EmbeddedBackend
    from tether.testing.fake_llm import FakeLLM

    run = run_dir / "warmstart"
    if (run / "checkpoint" / "trainer_state.json").exists():
        accuracy = _demo_accuracy(run)
        print(f"warm start: reusing {run / 'checkpoint'} (demonstrations {accuracy:.0%} right)")
        return run / "checkpoint", accuracy
    student = EmbeddedBackend(preset=args.preset, seed=args.seed)  # fresh: WarmStart fits its tokenizer
    with FakeLLM(handler=demonstrator(agent_module, questions, args)) as teacher:
        trainer = tether.Trainer(
            model=student,
            algorithm=tether.WarmStart(
                teacher=teacher.base_url,
                rollouts=args.demo_passes * len(questions),  # every question demo_passes times
                min_reward=0.0,  # every finished demonstration, right or wrong: the teacher is imperfect
                epochs=args.sft_epochs,
                lr=args.sft_lr,
                batch_size=32,
                micro_batch=32,
            ),
            n_runners=args.runners,
            seed=args.seed,
            name="warmstart",
            run_root=str(run_dir),
            sampling={"max_tokens": 80},
        )
        # every node's calls are fine-tuned (one shared policy), check_query's too: GRPO serves it with this model
        wrapped = tether.wrap(agent_module.graph, reward=data.reward, optimize=OPTIMIZE)
        try:
            result = trainer.fit(wrapped, train=[q.task() for q in questions])
        finally:
            tether._loop.run_sync(student.close())
    assert result.checkpoint is not None
    record = next(h for h in result.history if h.get("kind") == "warmstart")
    examples = next(h for h in result.history if h.get("kind") == "sft_data")
    print(
        f"warm start: {record['teacher_rollouts']} teacher runs, their final query right "
        f"{record['teacher_reward']:.0%} of the time; {examples['examples']} calls fine-tuned on"
    )
    return result.checkpoint, float(record["teacher_reward"])


def _demo_accuracy(run: Path) -> float:
    """The teacher's mean reward, as the warm-start run recorded it."""
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "warmstart":
            return float(record["teacher_reward"])
    raise RuntimeError(f"{run / 'metrics.jsonl'} records no warm start: delete {run} to build it again")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--run-dir", default="runs/sql", help="where the warm start, checkpoints and metrics go")
    parser.add_argument("--steps", type=int, default=50, help="GRPO steps")
    parser.add_argument("--eval-every", type=int, default=25, help="evaluate on the held-out tasks every N steps")
    parser.add_argument("--tasks-per-step", type=int, default=16, help="tasks per GRPO step")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per task (GRPO compares them)")
    parser.add_argument("--lr", type=float, default=2e-4, help="GRPO learning rate")
    parser.add_argument("--n-train", type=int, default=300, help="training problems (demonstrations, GRPO)")
    parser.add_argument("--n-test", type=int, default=100, help="held-out questions for the before/after numbers")
    parser.add_argument(
        "--demo-accuracy", type=float, default=0.25, help="how often demonstrations read 2nd-sense questions right"
    )
    parser.add_argument("--demo-typos", type=float, default=0.25, help="how often a first query has a typo")
    parser.add_argument("--demo-passes", type=int, default=4, help="demonstration runs over train questions")
    parser.add_argument(
        "--demo-check-noise",
        type=float,
        default=0.0,
        help="how often the demonstrator's checker says FIX to a query that ran and returned rows, right or not",
    )
    parser.add_argument("--sft-epochs", type=int, default=12, help="epochs of the warm-start fine-tuning")
    parser.add_argument("--sft-lr", type=float, default=3e-3, help="learning rate of the warm start")
    parser.add_argument("--preset", default="tiny", help="size preset of the embedded model")
    parser.add_argument("--runners", type=int, default=16, help="rollouts run concurrently")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument(
        "--policies",
        choices=("shared", "two", "checker"),
        default="shared",
        help="shared: one policy trained on write + rewrite, check served by it; two: writer and checker, each "
        "with its own weights and reward; checker: only the checker trains (the writer stays the warm start)",
    )
    parser.add_argument("--name", default=None, help="the run's folder under --run-dir (default: grpo / grpo-two)")
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in its folder (e.g. to a larger --steps)"
    )
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip fit's preflight (it stops a run whose first rollouts would train nothing, e.g. all wrong)",
    )
    parser.add_argument("--warm-start-only", action="store_true", help="build (or reuse) the warm start and stop")
    args = parser.parse_args(argv)

    import agent  # the user's LangGraph agent, unchanged

    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    questions = data.splits(n_train=args.n_train, n_val=0, n_test=args.n_test, seed=args.seed)
    checkpoint, demo_accuracy = warm_start(agent, run_dir, questions["train"], args)
    if args.warm_start_only:
        return 0

    trainer = tether.Trainer(
        model=f"embedded:{checkpoint}",
        algorithm=tether.GRPO(group_size=args.group_size, tasks_per_step=args.tasks_per_step, lr=args.lr),
        n_runners=args.runners,
        steps=args.steps,
        eval_every=args.eval_every,
        seed=args.seed,
        name=args.name or {"shared": "grpo", "two": "grpo-two", "checker": "grpo-checker"}[args.policies],
        run_root=str(run_dir),
        sampling={"max_tokens": 80},
    )
    optimize: Any = {"shared": OPTIMIZE, "two": POLICIES, "checker": {"checker": POLICIES["checker"]}}[
        args.policies
    ]
    reward = data.reward if args.policies == "shared" else policy_rewards
    wrapped = tether.wrap(agent.graph, reward=reward, optimize=optimize)
    before = held_out(agent, f"embedded:{checkpoint}", optimize, questions["test"], args)
    print("held-out before training: " + ", ".join(f"{k} {v:.0%}" for k, v in before.items()))
    result = trainer.fit(
        wrapped,
        train=[q.task() for q in questions["train"]],
        val=[q.task() for q in questions["test"]],
        resume=args.resume,
        preflight=not args.no_preflight,
    )
    _summary(result, demo_accuracy, len(questions["test"]), args.policies)
    if result.checkpoint is not None:
        trained = serving(result.checkpoint, optimize)
        try:
            after = held_out(agent, trained, optimize, questions["test"], args)
        finally:
            if not isinstance(trained, str):
                tether._loop.run_sync(trained.close())
        _held_out_table(before, after, args.policies)
    return 0


def serving(checkpoint: Path, optimize: Any) -> Any:
    """What serves a fit's checkpoint: ``embedded:<dir>`` for one policy; for a policy map, the embedded
    backend holding every policy's trained weights (``policies/<name>`` beside the frozen start)."""
    if isinstance(optimize, list):
        return f"embedded:{checkpoint}"
    from tether.models import open_backend

    backend: Any = open_backend(f"embedded:{checkpoint}")
    backend.declare_policies(list(optimize))
    backend.load_weights(str(checkpoint))
    return backend


def held_out(
    agent_module: Any, model: Any, optimize: Any, questions: list[data.Question], args: argparse.Namespace
) -> dict[str, float]:
    """Greedy figures of ``model`` on the held-out questions: the agent's execution accuracy and its checker's
    verdict accuracy in the loop (on the queries the writer wrote), and the checker on the fixed probe."""
    wrapped = tether.wrap(agent_module.graph, reward=data.reward, optimize=optimize)
    trainer = tether.Trainer(
        model=model, n_runners=args.runners, sampling={"temperature": 0.0, "max_tokens": 80}, progress=False
    )
    tasks = [q.task() for q in questions]
    report = trainer.dev(wrapped, tasks)
    # a checker that says OK to every query leaves rewrite_query uncalled: that is a result, not a fault
    problems = [p for p in report.all_problems if not p.startswith("unknown sub-agent")]
    if problems:
        raise RuntimeError("the held-out run went wrong:\n" + "\n".join(problems[:5]))
    inputs = [r.rollout.input for r in report]
    execution = [data.reward(t, r.output) for t, r in zip(inputs, report, strict=True)]
    checks = [
        data.verdict_right(t, str(c["query"]), str(c["verdict"]))
        for t, r in zip(inputs, report, strict=True)
        for c in (r.output or {}).get("checks", [])
    ]
    figures = {
        "execution": sum(execution) / len(execution),
        "verdicts_in_loop": sum(checks) / max(len(checks), 1),
    }
    probe = checker_probe.probe_accuracy(agent_module, model, questions, optimize, args.runners)
    figures.update({f"probe_{kind}": value for kind, value in probe.items()})
    return figures


def _held_out_table(before: dict[str, float], after: dict[str, float], policies: str) -> None:
    rows = {
        "execution": "execution accuracy",
        "verdicts_in_loop": "checker verdicts, in the loop",
        "probe_all": "checker verdicts, probe",
        "probe_gold": "  probe: gold query (OK)",
        "probe_confused": "  probe: other sense (FIX)",
        "probe_typo": "  probe: misspelt column (FIX)",
    }
    print(f"\nheld-out, greedy, --policies {policies}{'':14}before   after    gain")
    for key, label in rows.items():
        gain = 100 * (after[key] - before[key])
        print(f"{label:<46}{before[key]:>6.0%}  {after[key]:>6.0%}  {gain:>+5.0f} pts")


def _summary(result: Any, demo_accuracy: float, n_test: int, policies: str) -> None:
    if not result.evals:
        print(result.summary())  # says no evaluation was recorded
        return
    print(f"\nheld-out questions: {n_test} (never trained on)")
    if policies == "shared":
        print(f"trained nodes: {', '.join(OPTIMIZE)}; check_query is served by the same model, never trained")
    else:
        print("policies: " + "; ".join(f"{p} ({', '.join(nodes)})" for p, nodes in POLICIES.items()))
    print(f"demonstration runs used for the warm start: {demo_accuracy:.0%} right")
    rows = {"greedy_accuracy": "greedy", "sampled_accuracy": "sampled (T=1)"}
    print(result.summary(rows, heading="execution accuracy"))


if __name__ == "__main__":
    raise SystemExit(main())
