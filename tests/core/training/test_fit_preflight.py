"""``fit`` never looks like success when it would train nothing: the preflight, the reward contract, every
rollout kept in the run's store, and ``dev`` with a policy map on a remote model.

A newcomer's plain OpenAI-client agent (client built at import with a hard-coded URL) against the scripted fake
LLM, through the real proxy, runner and the run folder's SQLite store; the algorithm is a minimal one of the
user's own that records whether it was reached.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.models.remote import RemoteBackend  # noqa: E402
from tether.store import open_store  # noqa: E402
from tether.testing.fake_llm import FakeLLM, text  # noqa: E402
from tether.types import RolloutStatus  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
TASKS = [f"is {n} even?" for n in range(6)]


def answer(task: str) -> str:
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


def _model(request: dict[str, Any]) -> Any:
    """Right on the even numbers only, so rewards vary across tasks."""
    n = int(request["messages"][-1]["content"].split()[1])
    return text("yes" if n % 2 == 0 else "maybe")


def right(task: str, output: str) -> bool:  # the commonest way people write a reward
    return output == "yes"


class Probe:
    """An algorithm of the user's own: runs one batch, trains nothing."""

    def __init__(self) -> None:
        self.reached = False

    async def fit(self, session: Any, train: Any, val: Any) -> tether.FitResult:
        self.reached = True
        await session.run_batch(train[:3], 2)
        return tether.FitResult(run_dir=session.require_run("Probe").path)


async def _fit(tmp_path: Path, agent: Any, probe: Probe, url: str | None = None, **fit: Any) -> Any:
    async with FakeLLM(handler=_model) as llm:
        backend = RemoteBackend(url or llm.base_url)
        try:
            trainer = tether.Trainer(
                model=backend, algorithm=probe, run_root=str(tmp_path), name="r", progress=False
            )
            return await trainer.afit(agent, train=TASKS, **fit)
        finally:
            await backend.close()


def _stored(tmp_path: Path) -> list[tuple[str, str, str]]:
    """(status, mode, phase) of every rollout the run's store holds."""
    with sqlite3.connect(tmp_path / "r" / "store.db") as db:
        rows = db.execute("SELECT status, mode, metadata FROM rollouts").fetchall()
    return [(s, m, json.loads(meta or "{}").get("tether.phase", "")) for s, m, meta in rows]


async def test_a_reward_that_raises_stops_fit_before_training_with_its_error(tmp_path: Path) -> None:
    probe = Probe()
    wrong_arity = tether.wrap(answer, reward=lambda out: 1.0)
    with pytest.raises(tether.FitError) as caught:
        await _fit(tmp_path, wrong_arity, probe)
    message = str(caught.value)
    assert "preflight" in message and "the reward function failed on 8 of 8 rollouts" in message
    assert "takes 1 positional argument but 2 were given" in message
    assert "first failing rollout" in message
    assert not probe.reached, "nothing trained"
    # the preflight's rollouts are kept, and every failure is in the run folder
    assert _stored(tmp_path) == [("failed", "train", "preflight")] * 8
    failures = (tmp_path / "r" / "failures.jsonl").read_text().splitlines()
    assert len(failures) == 8 and "takes 1 positional argument" in json.loads(failures[0])["error"]
    assert json.loads(failures[0])["phase"] == "preflight"


async def test_no_reward_stops_fit_and_preflight_false_skips_the_check(tmp_path: Path) -> None:
    with pytest.raises(tether.FitError, match=r"has no reward: pass reward= to tether\.wrap"):
        await _fit(tmp_path, tether.wrap(answer), Probe())
    probe = Probe()
    await _fit(tmp_path, tether.wrap(answer), probe, preflight=False)
    assert probe.reached


async def test_a_bool_reward_counts_as_one_or_zero(tmp_path: Path) -> None:
    probe = Probe()
    await _fit(tmp_path, tether.wrap(answer, reward=right), probe)
    assert probe.reached
    store = open_store(f"sqlite:///{tmp_path / 'r' / 'store.db'}")
    try:
        rollouts = await store.list_rollouts()
    finally:
        await store.close()
    assert {r.status for r in rollouts} == {RolloutStatus.SUCCEEDED}
    assert {r.reward for r in rollouts} == {0.0, 1.0}
    # the preflight's 8 rollouts and the algorithm's 6 stay in the run's store (the dashboard lists them)
    assert sorted(p for _, _, p in _stored(tmp_path)) == [""] * 6 + ["preflight"] * 8


async def test_a_reward_for_an_unknown_sub_agent_is_an_error_naming_the_known_ones(tmp_path: Path) -> None:
    agent = tether.wrap(answer, reward=lambda task, out: {"writer": 1.0})
    with pytest.raises(
        tether.FitError, match="unknown sub-agent 'writer' in reward=; captured agents are: answer"
    ):
        await _fit(tmp_path, agent, Probe())
    async with FakeLLM(handler=_model) as llm:
        report = await tether.Trainer(model=llm.base_url).adev(agent, TASKS[:1])
    (rollout,) = report.rollouts
    assert not rollout.transitions, "nothing trains on a reward for nobody"
    assert any("unknown sub-agent 'writer'" in p for p in rollout.problems)


async def test_unknown_optimize_names_and_a_dead_model_stop_fit(tmp_path: Path) -> None:
    nobody = tether.wrap(answer, reward=right, optimize=["nobody"])
    with pytest.raises(
        tether.FitError, match="unknown sub-agent 'nobody' in optimize=; captured agents are: answer"
    ):
        await _fit(tmp_path, nobody, Probe())
    with pytest.raises(tether.FitError, match="8 of 8 rollouts failed") as caught:
        await _fit(tmp_path, tether.wrap(answer, reward=right), Probe(), url="http://127.0.0.1:9/v1")
    assert "first failing rollout" in str(caught.value) and "Traceback" not in str(caught.value).splitlines()[0]


async def test_an_optimized_sub_agent_the_preflight_did_not_meet_is_a_warning_not_unknown(tmp_path: Path) -> None:
    # a sub-agent on a path the preflight's few rollouts did not take (a rewrite node run only on FIX, say)
    agent = tether.wrap(answer, reward=right, optimize=["answer", "rewrite"])
    probe = Probe()
    with pytest.warns(UserWarning) as caught:
        await _fit(tmp_path, agent, probe)
    notes = [str(w.message) for w in caught]
    assert probe.reached, "the run goes on"
    assert any(n.startswith("preflight: sub-agent 'rewrite' in optimize= made no LLM call in ") for n in notes), (
        notes
    )
    assert not any("unknown sub-agent" in n for n in notes), notes
    assert all(w.filename == "tether.fit" for w in caught if "optimize=" in str(w.message))


async def test_dev_on_a_remote_model_runs_a_policy_map_and_shows_each_calls_policy() -> None:
    agent = tether.wrap(answer, reward=right, optimize={"writer": ["answer"]})
    async with FakeLLM(handler=_model) as llm:
        report = await tether.Trainer(model=llm.base_url).adev(agent, TASKS[:2])
    assert [r.status for r in report] == [RolloutStatus.SUCCEEDED] * 2
    assert all(t.policy == "writer" and t.trainable for r in report for t in r.transitions)
    assert "policy=writer trains" in str(report)


async def test_dev_metrics_name_counts_and_rates() -> None:
    flaky = tether.wrap(answer, reward=lambda task, out: 1.0 if "0" in task else out["no such key"])
    async with FakeLLM(handler=_model) as llm:
        metrics = (await tether.Trainer(model=llm.base_url).adev(flaky, TASKS[:4])).metrics()
    assert metrics["rollouts"] == 4.0 and metrics["succeeded"] == 1.0 and metrics["failed"] == 3.0
    assert metrics["success_rate"] == 0.25
    assert all(isinstance(v, float) for v in metrics.values())


async def test_an_agent_that_never_calls_the_model_stops_fit(tmp_path: Path) -> None:
    offline = tether.wrap(lambda task: "yes", reward=right)
    with pytest.raises(tether.FitError, match="made no LLM call through tether's endpoint"):
        await _fit(tmp_path, offline, Probe())


def test_stop_after_idle_steps_must_be_a_positive_int_or_none() -> None:
    assert tether.Trainer(stop_after_idle_steps=None).stop_after_idle_steps is None
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="stop_after_idle_steps must be an int >= 1 or None"):
            tether.Trainer(stop_after_idle_steps=bad)  # type: ignore[arg-type]
