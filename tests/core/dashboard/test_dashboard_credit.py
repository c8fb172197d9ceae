"""The dashboard shows the advantages training used: under ``credit="per_call"`` with a tool penalty, emitted
rewards, a reward mapping and a policy map (one sub-agent frozen), each call's policy, ``trainable`` flag,
value and advantage on the rollout page equal what ``assign_credit`` gave training, because each rollout
records the rule and the map it ran under."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether import spans  # noqa: E402
from tether.capture.context import agent_scope  # noqa: E402
from tether.dashboard.trace import rollout_detail  # noqa: E402
from tether.models.base import ChatRequest, ChatResult, Choice, ModelBackend  # noqa: E402
from tether.policies import PolicyMap  # noqa: E402
from tether.training.engine.session import as_task  # noqa: E402
from tether.training.signal.credit import Credit  # noqa: E402
from tether.types import Mode  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
LETTERS = "abcdefgh"


class Letters(ModelBackend):
    """Answers a letter drawn from the call's seed (a seeded run's calls differ); holds policies."""

    name = "letters"

    def declare_policies(self, names: list[str]) -> None:
        self.policies = list(names)

    async def chat(self, request: ChatRequest) -> ChatResult:
        letter = LETTERS[(request.seed or 0) % len(LETTERS)]
        return ChatResult([Choice({"role": "assistant", "content": letter}, "stop")], "letters")


def three_agents(task: str) -> dict[str, str]:
    out = {}
    for name in ("writer", "checker", "helper"):
        with agent_scope(name):
            reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
        out[name] = reply.choices[0].message.content or ""
        if name == "writer":
            tether.emit_reward(0.5 if out[name] in "abcd" else 0.0)  # (per_call: this call's own reward)
        if name == "checker" and out[name] in "ef":
            tether.emit_span("t", spans.tool_attributes("t", {}, error="E"), kind=tether.SpanKind.TOOL)
    return out


def reward(task: str, out: dict[str, str]) -> dict[str, float]:
    return {"writer": float(out["writer"] in "ab"), "checker": float(out["checker"] in "gh")}


async def test_the_rollout_page_shows_the_advantages_training_used() -> None:
    agent = tether.wrap(three_agents, reward=reward, optimize={"w": ["writer"], "c": ["checker"]})
    trainer = tether.Trainer(credit="per_call", tool_error_penalty=0.25, gamma=0.9, seed=3, progress=False)
    async with trainer.session(agent, model=Letters()) as session:
        tasks = [as_task(f"task {i}") for i in range(3)]
        batch = await session.run_batch(tasks, 4, mode=Mode.TRAIN, harvest=False)
        assert batch.trained and all(r.succeeded for r in batch.results)  # (the Session credited it, as for GRPO)
        shown_any = 0
        for result in batch.results:
            rollout = result.rollout
            meta = rollout.metadata
            assert Credit.from_metadata(meta[spans.CREDIT_METADATA]) == session.settings.credit_rule
            assert PolicyMap.from_metadata(meta[spans.POLICIES_METADATA]) == agent.policies
            group = [r.rollout.rollout_id for r in batch.results if r.rollout.task_id == rollout.task_id]
            detail = await rollout_detail(session.store, rollout.rollout_id, None, group)
            shown = [(t["policy"], t["trainable"], t["reward"], t["advantage"]) for t in detail["transitions"]]
            used = [(t.policy, t.trainable, t.reward, t.advantage) for t in result.transitions]
            assert shown == used
            assert [p for p, *_ in shown] == ["w", "c", "frozen"] and [t for _, t, *_ in shown] == [
                True,
                True,
                False,
            ]
            shown_any += sum(a != 0 for *_, a in shown)
            assert detail["group_size"] == 4
        assert shown_any  # (the batch had signal: the comparison is not of zeros)
        # the calls of one rollout got different advantages: not the one episode advantage the page used to show
        assert any(len({t.advantage for t in r.transitions[:2]}) > 1 for r in batch.results)
