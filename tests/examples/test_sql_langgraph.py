"""The LangGraph SQL example: its questions and reward, the agent's three nodes through tether, and selective
optimization — ``check_query`` is served by the model but its transitions never move the weights."""

from __future__ import annotations

import copy
import importlib
import json
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

import tether
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, Reply, text

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sql_langgraph"


def _example_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    """The example's modules, imported from its folder as its scripts do (``import data``), then taken out of
    ``sys.modules`` so that other examples' ``data`` / ``agent`` modules are not confused with them."""
    names = ("shop", "data", "agent")
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.path.insert(0, str(EXAMPLE))
    try:
        shop, data, agent = (importlib.import_module(name) for name in names)
    finally:
        sys.path.remove(str(EXAMPLE))
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    return shop, data, agent


shop, data, agent = _example_modules()

OPTIMIZE = ["write_query", "rewrite_query"]


# -- data ------------------------------------------------------------------------------------------------------


def test_splits_are_deterministic_and_disjoint() -> None:
    a, b = data.splits(seed=3), data.splits(seed=3)
    assert a == b
    assert data.splits(seed=4)["test"] != a["test"]
    texts = [{q.text for q in a[name]} for name in ("train", "val", "test")]
    assert [len(t) for t in texts] == [300, 40, 100]  # no duplicate inside a split either
    assert texts[0].isdisjoint(texts[1]) and texts[0].isdisjoint(texts[2]) and texts[1].isdisjoint(texts[2])
    assert {q.level for q in a["train"]} == set(data.LEVELS) == {q.level for q in a["test"]}
    with pytest.raises(ValueError, match="ask for fewer"):
        data.splits(n_train=10_000)


def test_every_question_is_well_posed() -> None:
    for q in data.all_questions():
        gold = shop.run(q.sql)
        assert gold, q
        assert data.reward(q.task(), q.sql) == 1.0
        assert data.reward(q.task(), q.confused) == 0.0, q  # the other sense gives other rows
        assert data.reward(q.task(), q.typo) == 0.0, q  # a misspelt column is an SQL error


def _question(level: str, ordered: bool | None = None) -> Any:
    return next(q for q in data.all_questions() if q.level == level and ordered in (None, q.ordered))


def test_reward_is_execution_match() -> None:
    q = _question("filter")
    task = q.task()
    assert data.reward(task, {"query": q.sql, "rows": []}) == 1.0  # the final state: its query is re-run
    reordered = q.sql + " ORDER BY name DESC"
    assert data.reward(task, reordered) == 1.0  # no order asked: any order of the same rows
    same_rows = q.sql.replace("SELECT name FROM products", "SELECT p.name FROM products p")
    assert data.reward(task, same_rows) == 1.0  # a different query with the same result counts
    assert data.reward(task, "SELECT name FROM products") == 0.0  # wrong rows
    assert data.reward(task, q.sql.replace("SELECT name", "SELECT name, price")) == 0.0  # extra column
    assert data.reward(task, "SELEC name FROM products") == 0.0  # syntax error
    assert data.reward(task, "SELECT nope FROM products") == 0.0  # unknown column
    assert data.reward(task, "") == 0.0 and data.reward(task, None) == 0.0 and data.reward(task, {}) == 0.0
    assert data.reward(task, "DELETE FROM products") == 0.0  # read-only: fails, and nothing is deleted
    assert data.reward(task, q.sql) == 1.0


def test_reward_checks_order_only_when_the_question_asks() -> None:
    q = _question("sorted", ordered=True)
    assert data.reward(q.task(), q.sql) == 1.0
    rows = shop.run(q.sql)
    assert len(rows) >= 2
    names = ", ".join(f"'{r[0]}'" for r in rows)
    flipped = "DESC" if "ASC" in q.sql else "ASC"
    reversed_order = f"SELECT name FROM products WHERE name IN ({names}) ORDER BY price {flipped}"
    assert sorted(shop.run(reversed_order)) == sorted(rows)
    assert data.reward(q.task(), reversed_order) == 0.0
    assert data.reward({**q.task(), "ordered": False}, reversed_order) == 1.0


def test_checker_reward_scores_each_verdict_against_execution_match() -> None:
    q = _question("aggregate")
    task = q.task()
    assert data.verdict_right(task, q.sql, "OK") and not data.verdict_right(task, q.sql, "FIX")
    assert data.verdict_right(task, q.confused, "FIX") and not data.verdict_right(task, q.confused, "OK")
    assert data.verdict_right(task, q.typo, "FIX") and not data.verdict_right(task, q.typo, "OK")
    checks = [(q.sql, "OK"), (q.confused, "OK"), (q.typo, "FIX"), (q.sql, "FIX")]
    output = {"query": q.sql, "checks": [{"query": sql, "verdict": v} for sql, v in checks]}
    assert data.checker_reward(task, output) == 0.5
    assert data.checker_reward(task, {"query": q.sql}) == 0.0 and data.checker_reward(task, q.sql) == 0.0


def test_runaway_query_is_stopped() -> None:
    cross = "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d"
    with pytest.raises(shop.sqlite3.OperationalError, match="interrupted"):
        shop.run(cross)
    assert data.reward({"sql": "SELECT 1", "ordered": False}, cross) == 0.0


def test_demonstrator_leans_to_the_first_sense_at_the_given_rates() -> None:
    qs = data.splits()["train"]
    assert 0.3 < sum(q.first_sense for q in qs) / len(qs) < 0.7  # both senses of every level are asked
    assert {q.level for q in qs if q.first_sense} == {q.level for q in qs if not q.first_sense} == set(data.LEVELS)
    rng = random.Random(0)
    writes = [(q, data.demo_write(q, rng, 0.4, 0.25)) for q in qs * 4]
    typos = sum(sql == q.typo for q, sql in writes) / len(writes)
    assert 0.2 < typos < 0.3
    valid = [(q, sql) for q, sql in writes if sql != q.typo]
    first = [sql == q.sql for q, sql in valid if q.first_sense]
    second = [sql == q.sql for q, sql in valid if not q.first_sense]
    assert all(first)  # first-sense questions are always read right
    assert 0.33 < sum(second) / len(second) < 0.47  # the others 40 % of the time, else in the first sense
    assert all(sql in (q.sql, q.confused) for q, sql in valid)
    assert all(data.demo_rewrite(q, rng, 1.0) == q.sql for q in qs)
    assert {data.demo_check(q.typo) for q in qs} == {"FIX"} and {data.demo_check(q.sql) for q in qs} == {"OK"}
    assert data.demo_check("SELECT name FROM products WHERE price > 1000") == "FIX"  # no rows
    noisy = [data.demo_check(q.sql, rng, 0.3) for q in qs]  # doubts valid results at the given rate
    assert 0.22 < noisy.count("FIX") / len(noisy) < 0.38
    assert {data.demo_check(q.typo, rng, 0.3) for q in qs} == {"FIX"}


# -- the agent through tether ----------------------------------------------------------------------------------


def _scripted(q: Any, *, first: str, checker: Callable[[str], str]) -> Callable[[dict[str, Any]], Reply]:
    """A FakeLLM handler answering each node of the agent (told apart by its system prompt)."""

    def handler(request: dict[str, Any]) -> Reply:
        system, user = (m["content"] for m in request["messages"][:2])
        if system == agent.WRITE_PROMPT:
            return text(first)
        if system == agent.CHECK_PROMPT:
            return text(checker(user))
        assert system == agent.REWRITE_PROMPT, system
        return text(f"```sql\n{q.sql};\n```")

    return handler


@pytest.fixture(scope="module")
def typo_run() -> Iterator[tuple[Any, Any, list[dict[str, Any]]]]:
    """One rollout through tether: the writer misspells a column, the checker sees the error and says FIX,
    the rewriter fixes it, the checker says OK."""
    q = _question("aggregate")
    handler = _scripted(q, first=q.typo, checker=lambda user: "FIX" if "Result: error" in user else "OK")
    with FakeLLM(handler=handler) as fake:
        backend = RemoteBackend(fake.base_url, return_token_ids=True)
        try:
            trainer = tether.Trainer(model=backend)
            report = trainer.dev(tether.wrap(agent.graph, reward=data.reward, optimize=OPTIMIZE), [q.task()])
        finally:
            tether._loop.run_sync(backend.close())
        yield q, report, fake.chat_requests


def test_dev_run_captures_all_three_nodes(typo_run: tuple[Any, Any, list[dict[str, Any]]]) -> None:
    q, report, requests = typo_run
    assert not report.all_problems, report.all_problems
    (rollout,) = report.rollouts
    assert rollout.reward == 1.0 and rollout.output["query"] == q.sql
    assert rollout.output["rows"] == [list(r) for r in shop.run(q.sql)]
    names = [t.agent_name for t in rollout.transitions]
    assert names == ["write_query", "check_query", "rewrite_query", "check_query"]
    assert report.agent_names == {"write_query", "check_query", "rewrite_query"}
    assert [t.trainable for t in rollout.transitions] == [True, False, True, False]
    assert all(t.prompt_token_ids and t.response_token_ids for t in rollout.transitions)
    # what each node saw: the checker and the rewriter get the failing query and its error
    assert requests[0]["messages"][1]["content"] == q.text
    assert f"SQL: {q.typo}\nResult: error: no such column: o.product" in requests[1]["messages"][1]["content"]
    assert requests[2]["messages"][1]["content"] == requests[1]["messages"][1]["content"]
    assert "Result: 1 row: " in requests[3]["messages"][1]["content"]


def test_the_loop_stops_after_max_rewrites() -> None:
    q = _question("filter")
    with FakeLLM(handler=_scripted(q, first=q.confused, checker=lambda user: "FIX")) as fake:
        report = tether.Trainer(model=fake.base_url).dev(tether.wrap(agent.graph, reward=data.reward), [q.task()])
    (rollout,) = report.rollouts
    names = [t.agent_name for t in rollout.transitions]
    assert names == ["write_query"] + ["check_query", "rewrite_query"] * agent.MAX_REWRITES + ["check_query"]
    assert rollout.reward == 1.0 and rollout.output["rewrites"] == agent.MAX_REWRITES


# -- selective optimization: check_query carries no gradient ---------------------------------------------------


def test_check_query_transitions_carry_no_gradient(
    typo_run: tuple[Any, Any, list[dict[str, Any]]],
) -> None:
    torch = pytest.importorskip("torch")
    from tether.algorithms.grpo import GRPO
    from tether.models.embedded import create_embedded

    _, report, _ = typo_run
    transitions = [copy.deepcopy(t) for t in report.rollouts[0].transitions]
    for t in transitions:
        t.advantage = 1.0  # as if the rollout beat its group: every transition gets the same advantage
    checks = [t for t in transitions if t.agent_name == "check_query"]
    optimized = [t for t in transitions if t.agent_name in OPTIMIZE]
    assert len(checks) == 2 and len(optimized) == 2
    assert not any(t.trainable for t in checks) and all(t.trainable for t in optimized)

    base = create_embedded(preset="nano", seed=0).model  # the FakeLLM's byte ids are valid token ids here
    assert all(max(t.prompt_token_ids + t.response_token_ids) < base.config.vocab_size for t in transitions)
    start = {k: v.clone() for k, v in base.state_dict().items()}

    def updated(batch: list[Any]) -> tuple[dict[str, Any], dict[str, float]]:
        model = copy.deepcopy(base)
        metrics = GRPO(group_size=2, lr=1e-2).update(model, batch)
        return model.state_dict(), metrics

    after_checks, metrics = updated(checks)
    assert metrics["trained_transitions"] == 0
    assert all(torch.equal(after_checks[k], start[k]) for k in start)

    after_optimized, metrics = updated(optimized)
    assert metrics["trained_transitions"] == 2 and metrics["grad_norm"] > 0
    assert any(not torch.equal(after_optimized[k], start[k]) for k in start)

    after_all, _ = updated(transitions)  # check_query's transitions in the batch change nothing
    assert all(torch.equal(after_all[k], after_optimized[k]) for k in start)


# -- train.py end to end ---------------------------------------------------------------------------------------


@pytest.fixture
def train_script() -> Iterator[ModuleType]:
    """``train.py`` imported as its own script would be, with the example folder on ``sys.path`` while it runs
    (it imports ``data`` and the user's ``agent`` by name), then taken out again."""
    names = ("shop", "data", "agent", "checker_probe", "train")
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.path.insert(0, str(EXAMPLE))
    try:
        yield importlib.import_module("train")
    finally:
        while str(EXAMPLE) in sys.path:
            sys.path.remove(str(EXAMPLE))
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def test_train_script_warm_starts_and_trains_a_grpo_step(
    train_script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``train.py`` on a tiny budget: a warm start (``tether.WarmStart``) on the teacher's calls of all three
    nodes, one GRPO step on the two optimized nodes, and the before/after table."""
    pytest.importorskip("torch")
    argv = ["--run-dir", str(tmp_path), "--preset", "nano", "--n-train", "12", "--n-test", "4"]
    argv += ["--demo-passes", "1", "--sft-epochs", "1", "--steps", "1", "--eval-every", "1"]
    # a 1-epoch warm start of the nano model may score 0 on every preflight rollout, which fit would rightly stop
    argv += ["--tasks-per-step", "2", "--group-size", "2", "--runners", "4", "--no-preflight"]
    assert train_script.main(argv) == 0
    warm = [json.loads(line) for line in (tmp_path / "warmstart" / "metrics.jsonl").read_text().splitlines()]
    (teacher,) = [r for r in warm if r["kind"] == "warmstart"]  # tether.WarmStart, its own run
    assert teacher["teacher_rollouts"] == teacher["kept"] == 12 and 0.0 <= teacher["teacher_reward"] <= 1.0
    (fine_tuned,) = [r for r in warm if r["kind"] == "sft_data"]
    assert fine_tuned["examples"] >= 24  # every node's calls: a write and at least one check per run
    records = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, 1]
    (step,) = [r for r in records if r["kind"] == "train"]
    assert step["rollouts"] == 4 and step["failed"] == 0
    out = capsys.readouterr().out
    assert "held-out questions: 4 (never trained on)" in out and "check_query is served by the same model" in out
    table = out[out.index("execution accuracy") :].splitlines()
    assert table[0].split()[-3:] == ["before", "after", "gain"] and table[1].split()[0] == "greedy"


# -- two policies: the writer and the checker, each with its own weights and reward ----------------------------


def test_two_policies_route_each_node_and_reward_it_on_its_own_target(
    train_script: ModuleType, tmp_path: Path
) -> None:
    """``--policies two`` wiring: an embedded model taught (by a short fine-tune on scripted runs) to write
    the gold query and to answer FIX to every check runs two held-out-style rollouts. The writer's calls are
    served and recorded by policy ``writer`` and credited with the execution match (1: the gold query); the
    checker's by policy ``checker`` and credited with its verdicts (0: FIX on a right query, every time)."""
    pytest.importorskip("torch")
    from tether.models.embedded import create_embedded, sft

    questions = [_question("filter"), _question("aggregate")]
    conversations = []
    for q in questions:  # the agent's exact requests, captured from a scripted run
        with FakeLLM(handler=_scripted(q, first=q.sql, checker=lambda user: "FIX")) as fake:
            scripted = tether.Trainer(model=fake.base_url)
            report = scripted.dev(tether.wrap(agent.graph, reward=data.reward), [q.task()])
        for t in report.rollouts[0].transitions:
            conversations.append([*t.messages, {"role": "assistant", "content": t.response.get("content")}])
    model = create_embedded([q.text for q in questions] + [q.sql for q in questions], preset="nano", seed=0)
    sft(model, conversations, epochs=60, lr=5e-3, batch_size=4, progress=False)
    model.save(tmp_path / "taught")

    wrapped = tether.wrap(agent.graph, reward=train_script.policy_rewards, optimize=train_script.POLICIES)
    sampling = {"temperature": 0.0, "max_tokens": 60}
    trainer = tether.Trainer(model=f"embedded:{tmp_path / 'taught'}", sampling=sampling)
    report = trainer.dev(wrapped, [q.task() for q in questions])
    assert not report.all_problems, report.all_problems
    for q, rollout in zip(questions, report.rollouts, strict=True):
        names = [t.agent_name for t in rollout.transitions]
        assert names == ["write_query"] + ["check_query", "rewrite_query"] * agent.MAX_REWRITES + ["check_query"]
        writer = data.reward(q.task(), rollout.output)
        checker = data.checker_reward(q.task(), rollout.output)
        assert (writer, checker) == (1.0, 0.0)  # the taught behaviour: right queries, wrong verdicts
        for t in rollout.transitions:
            assert t.trainable
            if t.agent_name == "check_query":
                assert (t.policy, t.reward) == ("checker", checker)
            else:
                assert (t.policy, t.reward) == ("writer", writer)
