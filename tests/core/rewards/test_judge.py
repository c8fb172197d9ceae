"""``tether.Judge`` as ``reward=``: a scripted judge (the fake LLM answering the judge's JSON) ranks each task's
group together, with the agent on another fake LLM, through the real proxy, runner and SQLite run store.

A plain OpenAI-client agent answers "what is 2+2?" with "4" or "5" in turn; the judge scores an attempt 1 when
its final output is 4. What is checked: one judge request per group with the shared task once, each rollout's
score and reason on its reward span, the judge's calls never transitions, the cache (in process and in the run
folder), a reply that is not scores retried then stopping the step with a ``FitError`` showing it, the
structured-output fallback, an unreachable judge named by its URL before anything runs, and the combined forms.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether import spans  # noqa: E402
from tether.dashboard.trace import rollout_detail  # noqa: E402
from tether.models.remote import RemoteBackend  # noqa: E402
from tether.rewards import judge_prompt  # noqa: E402
from tether.store import open_store  # noqa: E402
from tether.testing.fake_llm import FakeLLM, error, text  # noqa: E402
from tether.testing.judge import judge_attempts, judge_handler  # noqa: E402
from tether.types import RolloutStatus, SpanKind  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
TASK = "what is 2+2?"


def answer(task: str) -> str:
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "system", "content": "You add."}, {"role": "user", "content": task}]
    )
    return reply.choices[0].message.content or ""


def _alternating() -> Any:
    turns = itertools.count()
    return lambda request: text("4" if next(turns) % 2 == 0 else "5")


def _right(task: str, attempt: str) -> float:
    return 1.0 if attempt.endswith("final output: 4") else 0.0


class Batches:
    """An algorithm of the user's own: runs one group of ``size`` per task and keeps the batches."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self.batches: list[tether.Batch] = []

    async def fit(self, session: Any, train: Any, val: Any) -> tether.FitResult:
        self.batches.append(await session.run_batch(train[:1], self.size))
        return tether.FitResult(run_dir=session.require_run("Batches").path)


async def _dev(reward: Any, agent_llm: FakeLLM, repeats: int = 4) -> Any:
    backend = RemoteBackend(agent_llm.base_url)
    try:
        trainer = tether.Trainer(model=backend, progress=False)
        return await trainer.adev(tether.wrap(answer, reward=reward), [TASK], repeats=repeats)
    finally:
        await backend.close()


async def _fit(
    tmp_path: Path, reward: Any, agent_llm: FakeLLM, algorithm: Any, tasks: tuple[str, ...] = (TASK,), **fit: Any
) -> Any:
    backend = RemoteBackend(agent_llm.base_url)
    try:
        trainer = tether.Trainer(
            model=backend, algorithm=algorithm, run_root=str(tmp_path), name="r", progress=False
        )
        return await trainer.afit(tether.wrap(answer, reward=reward), train=list(tasks), **fit)
    finally:
        await backend.close()


def _judge_spans(rollout: Any) -> list[Any]:
    return [s for s in rollout.spans if s.kind == SpanKind.REWARD and s.name == "judge"]


async def test_the_judge_scores_a_group_together_and_each_rollout_keeps_its_score_and_reason() -> None:
    async with FakeLLM(handler=_alternating()) as agent_llm, FakeLLM(handler=judge_handler(_right)) as judge_llm:
        report = await _dev(tether.Judge(judge_llm.base_url), agent_llm)
    assert [r.status for r in report] == [RolloutStatus.SUCCEEDED] * 4
    assert sorted((r.output, r.reward) for r in report) == [("4", 1.0), ("4", 1.0), ("5", 0.0), ("5", 0.0)]
    # one request for the group: the task and the system prompt once, the four attempts under their ids
    (request,) = judge_llm.chat_requests
    prompt = request["messages"][-1]["content"]
    assert prompt.count(TASK) == 1 and prompt.count("You add.") == 1
    task, attempts = judge_attempts(request)
    assert task == TASK and sorted(attempts) == ["t1", "t2", "t3", "t4"]
    assert request["temperature"] == 0.0 and request["response_format"] == judge_prompt.SCHEMA
    for rollout in report:
        (span,) = _judge_spans(rollout)
        assert span.attributes[spans.REWARD_VALUE] == rollout.reward
        assert span.attributes[spans.REWARD_REASON] == f"scored {rollout.reward:g} by the script"
        assert span.attributes["judge.prompt_version"] == judge_prompt.PROMPT_VERSION
        assert span.attributes["judge.prompt_tokens"] > 0 and span.attributes["judge.completion_tokens"] > 0
        # the judge's call is not the agent's: one transition per rollout, the agent's
        assert len(rollout.transitions) == 1 and rollout.transitions[0].response["content"] == rollout.output
        assert "judge 1.00" in str(rollout) or "judge 0.00" in str(rollout)
    assert len(agent_llm.chat_requests) == 4
    assert "scored 1 by the script" in str(report)


async def test_a_judge_answered_from_the_run_folders_cache_is_never_paid_twice(tmp_path: Path) -> None:
    async with FakeLLM(handler=_alternating()) as agent_llm, FakeLLM(handler=judge_handler(_right)) as judge_llm:
        first = Batches()
        result = await _fit(tmp_path, tether.Judge(judge_llm.base_url), agent_llm, first, preflight=False)
        asked = len(judge_llm.chat_requests)
        assert asked == 1 and (tmp_path / "r" / "judge_cache.jsonl").exists()
        assert sorted(r.rollout.reward for r in first.batches[0].results) == [0.0, 0.0, 1.0, 1.0]
        assert first.batches[0].group_metrics["judge/calls"] == 1.0
        assert result is not None
        # the same run folder again, a new Judge (as a resumed process has): the same trajectories cost nothing
        again = Batches()
        await _fit(tmp_path, tether.Judge(judge_llm.base_url), agent_llm, again, preflight=False)
        assert len(judge_llm.chat_requests) == asked
        metrics = again.batches[0].group_metrics
        assert metrics["judge/cache_hits"] == 1.0 and metrics["judge/calls"] == 0.0
        assert sorted(r.rollout.reward for r in again.batches[0].results) == [0.0, 0.0, 1.0, 1.0]
        cached = [_judge_spans(r)[0].attributes["judge.cached"] for r in again.batches[0].results]
        assert cached == [True] * 4
    # the dashboard's trace shows each rollout's judge score with its reason
    store = open_store(f"sqlite:///{tmp_path / 'r' / 'store.db'}")
    try:
        rollout = again.batches[0].results[0].rollout
        detail = await rollout_detail(store, rollout.rollout_id, None)
    finally:
        await store.close()
    nodes = _flatten(detail)
    (judged,) = [n for n in nodes if n.get("type") == "reward" and n.get("name") == "judge"]
    assert judged["value"] == rollout.reward and judged["reason"] == f"scored {rollout.reward:g} by the script"
    assert judged["details"]["judge.prompt_version"] == judge_prompt.PROMPT_VERSION


def _flatten(value: Any) -> list[dict[str, Any]]:
    """Every dict nested anywhere in ``value`` (the trace's nodes)."""
    out: list[dict[str, Any]] = []
    if isinstance(value, dict):
        out.append(value)
        for item in value.values():
            out.extend(_flatten(item))
    elif isinstance(value, list):
        for item in value:
            out.extend(_flatten(item))
    return out


async def test_a_reply_that_is_not_scores_is_retried_then_stops_the_step_showing_it(tmp_path: Path) -> None:
    async with (
        FakeLLM(handler=_alternating()) as agent_llm,
        FakeLLM(default=text("I think they are all fine.")) as judge_llm,
    ):
        judge = tether.Judge(judge_llm.base_url, retries=2)
        algorithm = Batches()
        with pytest.raises(tether.FitError) as caught:
            await _fit(tmp_path, judge, agent_llm, algorithm)
    message = str(caught.value)
    assert f"Judge(model='{judge_llm.base_url}')" in message
    assert "gave no valid scores in 3 tries" in message and "I think they are all fine." in message
    assert len(judge_llm.chat_requests) == 3  # one group of the preflight, asked three times: then it stopped
    assert not algorithm.batches


async def test_an_endpoint_refusing_the_schema_is_asked_for_json_in_text() -> None:
    scripted = judge_handler(_right)

    def no_schema(request: dict[str, Any]) -> Any:
        refused = error(400, "response_format is not supported")
        return refused if "response_format" in request else scripted(request)

    async with FakeLLM(handler=_alternating()) as agent_llm, FakeLLM(handler=no_schema) as judge_llm:
        report = await _dev(tether.Judge(judge_llm.base_url), agent_llm)
    assert sorted(r.reward for r in report) == [0.0, 0.0, 1.0, 1.0]
    assert ["response_format" in r for r in judge_llm.chat_requests] == [True, False]


async def test_an_unreachable_judge_is_named_by_its_url_before_anything_runs(tmp_path: Path) -> None:
    dead = "http://127.0.0.1:9/v1"
    async with FakeLLM(handler=_alternating()) as agent_llm:
        algorithm = Batches()
        with pytest.raises(
            tether.FitError, match=r"preflight: the judge Judge\(.*\) is unreachable at http://127"
        ):
            await _fit(tmp_path, tether.Judge(dead), agent_llm, algorithm)
        assert not algorithm.batches and not agent_llm.chat_requests  # nothing ran
        report = await _dev(tether.Judge(dead), agent_llm, repeats=2)
    assert report.problems[0].startswith("the judge Judge(model='http://127.0.0.1:9/v1') is unreachable at")
    assert all(r.status == RolloutStatus.FAILED for r in report)  # and its rollouts say why, never a silent 0


async def test_a_weighted_list_and_a_mapping_combine_the_judge_with_the_users_function() -> None:
    def short(task: str, output: str) -> float:
        return 1.0 if len(output) == 1 else 0.0

    async with FakeLLM(handler=_alternating()) as agent_llm, FakeLLM(handler=judge_handler(_right)) as judge_llm:
        judge = tether.Judge(judge_llm.base_url)
        weighted = await _dev([(0.75, judge), (0.25, short)], agent_llm)
        mapped = await _dev({"answer": judge}, agent_llm)
    assert sorted(r.reward for r in weighted) == [0.25, 0.25, 1.0, 1.0]
    weights = {_judge_spans(r)[0].attributes.get(spans.REWARD_WEIGHT) for r in weighted}
    assert weights == {0.75}
    # a mapping credits the sub-agent with its judge's score (a final reward span per target)
    assert sorted(r.reward for r in mapped) == [0.0, 0.0, 1.0, 1.0]
    assert mapped.target_rewards == {"answer": 0.5}
    assert all(t.target == "answer" for r in mapped for t in r.transitions)


def test_the_judges_reply_is_read_strictly() -> None:
    ids = ["t1", "t2"]
    fenced = '```json\n{"scores": [{"id": "t1", "score": 1, "reason": "right"}, {"id": "t2", "score": 0.5}]}\n```'
    assert judge_prompt.parse(fenced, ids) == {"t1": (1.0, "right"), "t2": (0.5, "")}
    for reply, why in [
        ("no json here", "not JSON"),
        ('{"scores": [{"id": "t1", "score": 1.5, "reason": ""}]}', "outside"),
        ('{"scores": [{"id": "t1", "score": 1, "reason": ""}]}', "t2 are not scored"),
        ('{"scores": [{"id": "t9", "score": 1, "reason": ""}]}', "unknown attempt id"),
        ('{"scores": [{"id": "t1", "score": "high", "reason": ""}]}', "not a number"),
    ]:
        with pytest.raises(ValueError, match=why):
            judge_prompt.parse(reply, ids)
    assert json.dumps(judge_prompt.SCHEMA)  # the schema is JSON as sent


def test_wrap_refuses_a_reward_form_it_cannot_read() -> None:
    judge = tether.Judge("http://127.0.0.1:9/v1")
    with pytest.raises(TypeError, match=r"a weighted reward= list holds \(weight, reward\) pairs"):
        tether.wrap(answer, reward=[judge])
    with pytest.raises(TypeError, match=r"reward must be a function \(task, output\) -> number, tether\.Judge"):
        tether.wrap(answer, reward="judge")
    with pytest.raises(ValueError, match="weight must be a finite number"):
        tether.wrap(answer, reward=[(float("nan"), judge)])
    with pytest.raises(TypeError, match="mapping keys are sub-agent or policy names"):
        tether.wrap(answer, reward={3: judge})
