"""tether.RayRunners with a LangGraph graph: the calculator graph of the langgraph plugin's tests
(tests/plugins/langgraph/langgraph_calc_graph.py: planner, agent, tools and finish nodes, its model clients built
at import), which the actors import by name, as a user's installed module.

Through 4 actors, with the store on PostgreSQL: ``Trainer.dev`` against the scripted fake LLM records what an
in-process run records (spans, node names, transitions, rewards); one GRPO step of the embedded model trains
on the actors' rollouts as it does on in-process ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import langgraph_calc_graph
import langgraph_script
import pytest
import torch
from recorded import recorded

import tether
from tether import spans
from tether.models.embedded import EmbeddedBackend
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, Reply
from tether.testing.pg_server import TempPostgres
from tether.training.run.result import FitResult
from tether.types import RolloutStatus, SpanKind, Transition

# the graph's async model client binds its connection pool to the loop it first runs in, as a user's does
pytestmark = [pytest.mark.usefixtures("ray_head"), pytest.mark.asyncio(loop_scope="session")]

TASKS = [langgraph_script.task(i) for i in range(8)]
NODES_CALLING_THE_MODEL = {"planner", "agent", "finish"}
#: the graph's final state holds LangChain messages, whose ids are fresh uuids on every run
MESSAGE_IDS = frozenset({"id"})


def _reply(request: dict[str, Any]) -> Reply:
    """The langgraph tests' script, with tool call ids that are the same on every run."""
    reply = langgraph_script.reply(request)
    for i, call in enumerate(reply.tool_calls):
        call.id = f"call-{i}-{len(request['messages'])}"
    return reply


def _calculator(reward: str) -> tether.WrappedAgent:
    """The graph wrapped with a reward built here: a closure travels to the actors by value (a function of this
    test module would travel by reference, and the actors cannot import the test module)."""

    def right_sum(task: dict[str, Any], output: dict[str, Any]) -> float:
        a, _, b = task["question"].removeprefix("What is ").rstrip("?").split()
        return 1.0 if output["answer"] == f"Final answer: The result is {float(int(a) + int(b))}." else 0.0

    def checksum(task: dict[str, Any], output: dict[str, Any]) -> float:
        """A reward the untrained model's varied answers spread over (a checksum of the answer's characters),
        so no group of samples is flat: every group has something to learn from."""
        return sum(map(ord, str(output.get("answer", "")))) % 97 / 96

    rewards = {"right_sum": right_sum, "checksum": checksum}
    return tether.wrap(langgraph_calc_graph.graph, reward=rewards[reward])


async def _dev(llm: FakeLLM, **trainer: Any) -> Any:
    backend = RemoteBackend(llm.base_url, return_token_ids=True, logprobs=True)
    try:
        return await tether.Trainer(model=backend, **trainer).adev(_calculator("right_sum"), TASKS)
    finally:
        await backend.close()


async def test_dev_through_four_actors_on_postgresql_records_what_an_in_process_run_records(
    pg_server: TempPostgres,
) -> None:
    async with FakeLLM(handler=_reply) as llm:
        expected = recorded(await _dev(llm, n_runners=4), output_ids=MESSAGE_IDS)
        report = await _dev(llm, store=pg_server.new_database(), runners=tether.RayRunners(n=4))
    assert all(r.status == RolloutStatus.SUCCEEDED for r in report), "\n".join(r.error or "" for r in report)
    got = recorded(report, output_ids=MESSAGE_IDS)
    assert all(reward == 1.0 for _, _, reward, *_ in got.values())
    for r in report:  # planner, agent (a tool call), tools, agent (reads the result), finish: in the actors
        assert [t.agent_name for t in r.transitions] == ["planner", "agent", "agent", "finish"]
        assert [s.agent_name for s in r.spans if s.kind == SpanKind.TOOL] == ["tools"]
        assert all(s.attributes["token_ids_available"] for s in r.spans if s.name == spans.LLM_CALL)
    assert got == expected


@dataclass
class _GRPO(tether.GRPO):
    """tether.GRPO, keeping the transitions it was given to train on."""

    trained: list[Transition] = field(default_factory=list)

    def update(self, model: Any, transitions: Sequence[Transition], **kwargs: Any) -> dict[str, float]:
        self.trained.extend(transitions)
        return super().update(model, transitions, **kwargs)


async def _fit_step(backend: EmbeddedBackend, run_root: Path, name: str, **trainer: Any) -> tuple[FitResult, Any]:
    """One GRPO step (2 tasks x 4 samples); the result, and per rollout trained: its transitions' nodes and
    the weights version that sampled them."""
    grpo = _GRPO(group_size=4, tasks_per_step=2, lr=1e-3)
    result = await tether.Trainer(
        model=backend,
        algorithm=grpo,
        steps=1,
        name=name,
        run_root=str(run_root),
        progress=False,
        sampling={"max_tokens": 8},
        **trainer,
    ).afit(_calculator("checksum"), TASKS[:2])
    rollouts: dict[str, list[Transition]] = {}
    for t in grpo.trained:
        rollouts.setdefault(t.rollout_id, []).append(t)
    calls = [
        [(t.agent_name, t.weights_version) for t in sorted(ts, key=lambda t: t.step)] for ts in rollouts.values()
    ]
    return result, sorted(calls)


def _params(backend: EmbeddedBackend) -> list[torch.Tensor]:
    return [p.detach().clone() for p in backend.model.parameters()]


async def test_one_grpo_step_of_the_embedded_model_through_four_actors_on_postgresql(
    pg_server: TempPostgres, tmp_path: Path
) -> None:
    # the same untrained model twice (same preset and seed): one steps in-process, one through the actors
    local, remote = (EmbeddedBackend(preset="nano", seed=0) for _ in range(2))
    before = _params(remote)
    assert all(torch.equal(a, b) for a, b in zip(_params(local), before, strict=True))
    expected, expected_calls = await _fit_step(local, tmp_path, "in-process", n_runners=4)
    store = pg_server.new_database()
    result, calls = await _fit_step(remote, tmp_path, "ray", store=store, runners=tether.RayRunners(n=4))

    (step,) = result.history
    (expected_step,) = expected.history
    assert step.keys() == expected_step.keys()
    # 2 tasks x 4 samples, none failed, in 2 groups with rewards to learn from, all trained on; sampling is
    # not seeded, so the rewards themselves differ from the in-process run's
    for key in ("kind", "step", "rollouts", "failed", "groups"):
        assert step[key] == expected_step[key], key
    assert (step["rollouts"], step["failed"], step["groups"]) == (8, 0, 2)
    assert step["flat_groups"] == 0 and step["trained_transitions"] == step["transitions"]
    # the actors' transitions were sampled on the weights being trained, with the logprobs the trainer computes
    assert step["stale_dropped"] == 0 and step["drift_max"] < 1e-3, step
    assert any(not torch.equal(a, b) for a, b in zip(_params(remote), before, strict=True))
    # the same graph path in both runs: planner, agent, finish (the untrained model calls no tool), sampled on
    # the weights before the step (version 0); one transition per model call
    assert len(calls) == 8 and calls == expected_calls
    assert all(call == ("planner", 0) for call, *_ in calls)
    assert {node for rollout in calls for node, _ in rollout} <= NODES_CALLING_THE_MODEL
    assert step["transitions"] == expected_step["transitions"] == sum(len(c) for c in calls)
