"""The OpenAI Agents SDK's ``customer_service`` example (examples/customer_service_openai_agents, its agent code
unchanged) trained with no answer key: ``reward=tether.Judge(...)`` with the example's rubric, the judge a
scripted one on tether's fake LLM (``tether.testing.judge``).

``dev``: the agents on a fake LLM that answers each one as the SDK's example intends (triage hands off, the FAQ
agent looks the question up, the seat booking agent updates the seat) or, on every other rollout, answers the
customer itself without a tool; the judge's score and reason are on each rollout, and only the named sub-agent's
calls would train. ``fit``: one GRPO step on the embedded model with the judge's rewards.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents.decorators")  # the example imports the SDK's ``tool`` (openai-agents >= 0.19)

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.store import open_store
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call
from tether.testing.judge import judge_handler
from tether.trainer import Trainer
from tether.types import Mode, RolloutStatus, SpanKind

EXAMPLE_DIR = Path(__file__).resolve().parents[3] / "examples" / "customer_service_openai_agents"


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


agent = _load("agent", EXAMPLE_DIR / "agent.py")  # train.py imports it as ``agent``: the same module
train = _load("customer_service_train", EXAMPLE_DIR / "train.py")
# out of the way of other tests' ``agent`` modules (train.py holds its own reference)
del sys.modules["agent"]
sys.path.remove(str(EXAMPLE_DIR))
assert train.agent is agent

FAQ, SEAT = (
    "How many bags can I bring on the plane?",
    "My confirmation number is K7X2QP. Please change my seat to 14C.",
)


def _agents_llm() -> Any:
    """The agents' model: of each question's rollouts, alternately one does the routine and one answers off the
    cuff (counted per question: rollouts of two tasks run concurrently and may interleave in any order)."""
    turns: collections.Counter[str] = collections.Counter()

    def handle(request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        system = str(messages[0].get("content") or "")
        question = next(str(m["content"]) for m in messages if m.get("role") == "user")
        results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        if "triaging agent" in system:
            turns[question] += 1
            if turns[question] % 2 == 0:
                return text("I think you can bring two bags, and seats are changed at the gate.")
            seat = "seat to" in question
            return tool_call("transfer_to_seat_booking_agent" if seat else "transfer_to_faq_agent", {})
        if len(results) >= 2:  # the handoff's result, then the specialist's tool result
            return text(f"Done: {results[-1]}")
        if "You are an FAQ agent" in system:
            return tool_call("faq_lookup_tool", {"question": question})
        if "You are a seat booking agent" in system:
            booking = re.search(r"number is (\w+)\. Please change my seat to (\w+)", question)
            assert booking is not None, question
            return tool_call("update_seat", {"confirmation_number": booking[1], "new_seat": booking[2]})
        return text("?")

    return handle


def _judge_score(task: str, attempt: str) -> float:
    """The scripted judge: an answer from the FAQ tool, or a confirmed seat change, is good; a made-up one not."""
    if "faq_lookup_tool" in attempt and "one bag" in attempt.rsplit("final output:", 1)[-1]:
        return 1.0
    if "update_seat" in attempt and "Updated seat to 14C for confirmation number K7X2QP" in attempt:
        return 1.0
    return 0.1


def _judge_spans(rollout: Any) -> list[Any]:
    return [s for s in rollout.spans if s.kind == SpanKind.REWARD and s.name == "judge"]


async def test_dev_shows_the_judges_score_and_reason_on_each_customer_conversation() -> None:
    async with FakeLLM(handler=_agents_llm()) as agents_llm, FakeLLM(handler=judge_handler(_judge_score)) as judge:
        backend = RemoteBackend(agents_llm.base_url, return_token_ids=True)
        try:
            reward = train.judge(judge.base_url)
            wrapped = train.wrapped(reward, optimize=["FAQ Agent"])
            report = await Trainer(model=backend, progress=False).adev(wrapped, [FAQ, SEAT], repeats=2)
        finally:
            await backend.close()
    assert len(report.rollouts) == 4
    for rollout in report.rollouts:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        (span,) = _judge_spans(rollout)
        assert span.attributes[spans.REWARD_VALUE] == rollout.reward
        assert span.attributes[spans.REWARD_REASON] == f"scored {rollout.reward:g} by the script"
        # only the named sub-agent's calls are trained
        for t in rollout.transitions:
            assert t.trainable == (t.agent_name == "FAQ Agent"), (t.agent_name, t.trainable)
    # one judge request per task's group, with the example's rubric; each group has a routine and a made-up answer
    assert len(judge.chat_requests) == 2
    assert all(train.RUBRIC in json.dumps(r["messages"]) for r in judge.chat_requests)
    by_task: dict[str, list[float]] = {}
    for rollout in report.rollouts:
        by_task.setdefault(rollout.rollout.input, []).append(rollout.reward)
    assert {task: sorted(values) for task, values in by_task.items()} == {FAQ: [0.1, 1.0], SEAT: [0.1, 1.0]}
    shown = str(report)
    assert "judge 1.00: scored 1 by the script" in shown and "judge 0.10: scored 0.1 by the script" in shown
    seat = next(r for r in report.rollouts if r.rollout.input == SEAT and r.reward == 1.0)
    assert [t.agent_name for t in seat.transitions] == ["Triage Agent", "Seat Booking Agent", "Seat Booking Agent"]


_EMBEDDED = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("tether.models.embedded")


@pytest.mark.skipif(not _EMBEDDED, reason='the embedded model needs torch: pip install "tether[embedded]"')
async def test_one_grpo_step_on_the_embedded_model_trains_with_the_judges_rewards(tmp_path: Path) -> None:
    from tether.models.embedded import EmbeddedBackend

    def terse(task: str, attempt: str) -> float:  # the untrained model babbles: the judge prefers it brief
        return round(1.0 / (1.0 + len(attempt.rsplit("final output:", 1)[-1]) / 20.0), 3)

    async with FakeLLM(handler=judge_handler(terse)) as judge:
        trainer = Trainer(
            model=EmbeddedBackend(default_max_tokens=12),
            algorithm=tether.GRPO(group_size=2, tasks_per_step=2),
            steps=1,
            eval_every=1,
            run_root=str(tmp_path),
            name="cs",
            progress=False,
        )
        wrapped = train.wrapped(train.judge(judge.base_url), optimize=["Triage Agent"])
        result = await trainer.afit(wrapped, train=train.tasks(2, 0), preflight=False)
        asked = len(judge.chat_requests)
    assert asked == 2  # one per task's group
    assert result.run_dir is not None
    metrics = [json.loads(line) for line in (Path(result.run_dir) / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if "judge/calls" in m)
    # the judge's rewards differ within each group, so the step trained (a gradient) on the triage agent's calls
    assert step["judge/calls"] == 2.0 and step["flat_groups"] == 0 and step["grad_norm"] > 0
    store = open_store(f"sqlite:///{Path(result.run_dir) / 'store.db'}")
    named = 0
    try:
        rollouts = await store.list_rollouts(mode=Mode.TRAIN)
        assert len(rollouts) == 4
        for rollout in rollouts:
            assert rollout.status == RolloutStatus.SUCCEEDED
            (attempt,) = await store.get_attempts(rollout.rollout_id)
            found = await store.get_spans(attempt.attempt_id)
            (judged,) = [s for s in found if s.kind == SpanKind.REWARD and s.name == "judge"]
            assert judged.attributes[spans.REWARD_REASON].endswith("by the script")
            assert rollout.reward == judged.attributes[spans.REWARD_VALUE]
            llm = [s for s in found if spans.is_proxy_llm_span(s)]  # the model calls the proxy answered
            assert llm and llm[0].agent_name == "Triage Agent"
            named += sum(s.agent_name == "Triage Agent" for s in llm)
    finally:
        await store.close()
    assert step["trained_transitions"] == named  # the named sub-agent's calls, and no other's
