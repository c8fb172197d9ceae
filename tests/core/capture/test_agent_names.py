"""Any string a framework accepts as a sub-agent name travels to the proxy (percent-encoded in the
``X-Tether-Agent`` header), is recorded as written, and matches ``optimize=`` and policy maps with its
surrounding whitespace ignored (``tether.policies.agent_key``). Also: ``dir(tether)`` lists the lazily loaded
algorithms."""

from __future__ import annotations

import openai
import pytest

import tether
from tether import spans
from tether.capture import redirect
from tether.capture.context import (
    RolloutScope,
    agent_scope,
    decode_agent_header,
    encode_agent_header,
    rollout_scope,
)
from tether.capture.span_batcher import SpanBatcher
from tether.models.base import ChatRequest, ChatResult, Choice, ModelBackend
from tether.policies import PolicyMap, agent_key
from tether.proxy import ProxyServer
from tether.store.memory import MemoryStore
from tether.testing.fake_llm import FakeLLM, text
from tether.training.signal.transitions import build_transitions, unknown_optimize_names
from tether.types import RolloutStatus

#: names frameworks accept: a CrewAI role folded in YAML (`role: >` keeps a final newline), spaces around a
#: name, non-ASCII text, a percent sign, control characters
NAMES = ["Activity Planner\n", "  writer ", "naïve 代理", "50% off%2F", "tab\there\r\nthere"]


class PolicyEcho(ModelBackend):
    name = "echo"

    async def chat(self, request: ChatRequest) -> ChatResult:
        return ChatResult([Choice({"role": "assistant", "content": str(request.policy)}, "stop")], "echo")


@pytest.mark.parametrize("name", NAMES)
def test_header_encoding_round_trips_and_is_a_valid_header_value(name: str) -> None:
    value = encode_agent_header(name)
    assert value.isascii() and value.isprintable() and value == value.strip()
    assert decode_agent_header(value) == name
    assert encode_agent_header("write_query") == "write_query"  # plain names travel unchanged


def test_one_matching_rule_surrounding_whitespace_ignored() -> None:
    assert agent_key("Activity Planner\n") == agent_key("  Activity Planner") == "Activity Planner"
    assert agent_key(" \n") is None and agent_key(None) is None
    split = PolicyMap.from_optimize({"planner": ["Activity Planner"], "writer": ["writer\n"]})
    assert split.policy_of("Activity Planner\n") == "planner" and split.trains("Activity Planner\n")
    assert split.policy_of("  writer ") == "writer"
    assert split.policy_of("Activity  Planner") == "frozen"  # only surrounding whitespace is ignored
    with pytest.raises(ValueError, match="in two policies"):
        PolicyMap.from_optimize({"a": ["x"], "b": ["x\n"]})
    with pytest.raises(ValueError, match="non-empty strings"):
        PolicyMap.from_optimize(["  "])
    assert unknown_optimize_names(frozenset({"Activity Planner"}), {"Activity Planner\n"}) is None
    message = unknown_optimize_names(frozenset({"Planner"}), {"Activity Planner\n"})
    assert message is not None and "'Activity Planner\\n'" in message  # shown as written, whitespace visible


async def test_any_name_reaches_the_proxy_as_written_and_routes_by_the_rule() -> None:
    # a user's client, built before tether with a hard-coded URL, as an agent module would
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0)
    store = MemoryStore()
    await store.enqueue([tether.types.RolloutSpec(input="q")])
    ((rollout, attempt),) = await store.dequeue("w")
    policies = PolicyMap.from_optimize({"planner": ["Activity Planner"], "other": [n.strip() for n in NAMES[1:]]})
    answers = []
    async with SpanBatcher(store) as batcher:
        async with (
            ProxyServer(PolicyEcho(), batcher=batcher, policies=policies) as proxy,
            proxy.attempt(attempt.rollout_id, attempt.attempt_id) as url,
        ):
            with redirect.installed(), rollout_scope(RolloutScope(attempt.rollout_id, attempt.attempt_id, url)):
                for name in NAMES:
                    with agent_scope(name):
                        reply = await client.chat.completions.create(
                            model="m", messages=[{"role": "user", "content": name}]
                        )
                    answers.append(reply.choices[0].message.content)
            await proxy.flush()
    await client.close()
    recorded = await store.get_spans(attempt.attempt_id)
    assert [s.agent_name for s in recorded] == NAMES
    assert answers == ["planner"] + ["other"] * (len(NAMES) - 1)
    assert [s.attributes[spans.POLICY] for s in recorded] == answers
    report = build_transitions(rollout, recorded, policies=PolicyMap.from_optimize(["Activity Planner"]))
    assert [t.trainable for t in report.transitions] == [True] + [False] * (len(NAMES) - 1)


_planner = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0)


def _plan(city: str) -> str:
    with agent_scope("Activity Planner\n"):  # as a CrewAI role written `role: >` in YAML arrives
        reply = _planner.chat.completions.create(model="m", messages=[{"role": "user", "content": city}])
    return reply.choices[0].message.content or ""


def test_dev_with_a_folded_yaml_role_trains_the_named_agent() -> None:
    agent = tether.wrap(_plan, optimize=["Activity Planner"], reward=lambda task, out: 1.0)
    with FakeLLM(handler=lambda request: text("a walk in the park")) as llm:
        report = tether.Trainer(model=llm.base_url).dev(agent, ["Lisbon"])
    (rollout,) = report
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert [t.agent_name for t in rollout.transitions] == ["Activity Planner\n"]
    assert [t.trainable for t in rollout.transitions] == [True]
    assert not report.all_problems, report.all_problems


def test_dir_lists_the_lazily_loaded_algorithms() -> None:
    names = dir(tether)
    for name in ("GRPO", "APO", "SFT", "VERL", "Joint", "Distill", "Trainer", "wrap"):
        assert name in names
