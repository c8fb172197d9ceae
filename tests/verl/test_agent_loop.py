"""tether's agent loop inside verl's own V1 agent-loop worker, on CPU.

What runs for real: ``VERL.prepare`` (the parquet dataset, the agent-loop YAML, the pickled agent, verl's
config checked by verl), verl's ``AgentLoopWorker`` set-up (its typed configs, the tokenizer, our loop
registered from the YAML), verl's dataset and collate, and verl's V1 worker methods — ``generate_sequences``
(one background task per prompt), ``_run_prompt`` (``rollout.n`` sessions), ``_run_agent_loop`` (the loop
built through verl's registry with Hydra) and ``_agent_loop_postprocess`` (rows keyed ``{uid}_{session}_
{index}`` and tagged) — with a real tether ``Session`` whose proxy forwards to tether's fake OpenAI server
standing in for verl's vLLM servers. What does not: Ray (the worker is built in this process) and
TransferQueue's store, whose two put calls are captured here. The captured rows then go through verl's GRPO
advantage computation."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.algorithms.verl import agent_loop as tether_loop  # noqa: E402
from tether.capture.context import agent_scope  # noqa: E402
from tether.testing.fake_llm import FAKE_LOGPROB, FakeLLM, text  # noqa: E402
from tether.training.run.run_dir import RunDir  # noqa: E402
from tether.training.run.settings import Settings  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)


def solve(task: str) -> str:
    """Two sub-agents: a writer (trained) and a checker (not in optimize=, its calls kept but untrained)."""
    with agent_scope("writer"):
        draft = client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": task}])
    answer = draft.choices[0].message.content or ""
    with agent_scope("checker"):
        client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": f"check: {answer}"}])
    return answer


def reward(task: str, output: str) -> float:
    return 1.0 if output == "good" else 0.0


def _replies() -> Any:
    writes = itertools.cycle(["good", "bad"])

    def handler(request: dict[str, Any]) -> Any:
        content = request["messages"][-1]["content"]
        return text("fine") if content.startswith("check:") else text(next(writes))

    return handler


async def test_verls_worker_runs_one_tether_rollout_per_session_and_stores_one_row_per_call(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verl_advantages: Any
) -> None:
    import verl.utils.tensordict_utils as tu
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _agent_loop_registry
    from verl.trainer.ppo.v1 import agent_loop_tq
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    agent = tether.wrap(solve, reward=reward, optimize=["writer"])
    algo = tether.VERL(model=str(tiny_model), group_size=2, batch_size=1, response_length=64)
    session = tether.Session(agent, algo.backend, run=RunDir.create(tmp_path, "run"), settings=Settings(steps=1))
    config = algo.prepare(session, [tether.Task(input="write", task_id="t1")], [])

    stored: list[tuple[list[str], Any, list[dict[str, Any]]]] = []
    statuses: list[tuple[str, str]] = []

    async def kv_batch_put(keys: list[str], fields: Any, tags: list[dict[str, Any]], partition_id: str) -> None:
        stored.append((keys, fields, tags))

    async def kv_put(key: str, partition_id: str, tag: dict[str, Any]) -> None:
        statuses.append((key, tag["status"]))

    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_batch_put", kv_batch_put)
    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_put", kv_put)

    async with FakeLLM(handler=_replies()) as llm:
        config.tether.server_addresses = [f"127.0.0.1:{llm.port}"]  # what tether's task runner fills in
        worker_cls = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__
        worker = worker_cls.__new__(worker_cls)
        AgentLoopWorker.__init__(worker, config, llm_client=None)  # verl's set-up, without TransferQueue
        worker.background_tasks = set()
        assert tether_loop.LOOP_NAME in _agent_loop_registry  # registered from the YAML tether wrote

        # the batch as verl's V1 trainer makes it: dataset rows, collated, a uid per prompt, the step
        dataset = RLHFDataset(config.data.train_files, worker.tokenizer, config.data)
        batch = tu.get_tensordict(collate_fn([dataset[0]]))
        tu.assign_non_tensor_data(batch, "uid", "uid-1")
        tu.assign_non_tensor_data(batch, "global_steps", 3)
        await worker.generate_sequences(batch)
        await asyncio.wait_for(asyncio.gather(*worker.background_tasks), 60)

        runtime = tether_loop._RUNTIMES.pop(str(config.tether.agent_path))
        requests = llm.chat_requests
        await runtime.close()

    assert statuses == [("uid-1", "running"), ("uid-1", "finished")]
    assert runtime.batches == 1  # both sessions' rollouts ran in one Session batch
    assert len(requests) == 4 and {r["model"] for r in requests} == {llm.model}
    assert all(r["return_token_ids"] and r["logprobs"] and r["max_tokens"] == 64 for r in requests)

    keys = [k for ks, _, _ in stored for k in ks]
    assert sorted(keys) == ["uid-1_0_0", "uid-1_0_1", "uid-1_1_0", "uid-1_1_1"]
    tags = [t for _, _, ts in stored for t in ts]
    assert {(t["status"], t["min_global_steps"], t["max_global_steps"], t["global_steps"]) for t in tags} == {
        ("success", 2, 2, 3)
    }
    rows = [field for _, fields, _ in stored for field in _unstack(fields)]
    by_key = dict(zip(keys, rows, strict=True))
    for session_id in (0, 1):
        checker, writer = by_key[f"uid-1_{session_id}_0"], by_key[f"uid-1_{session_id}_1"]
        assert checker["extra_fields"]["tether"]["agent"] == "checker" and checker["response_mask"] == [0] * 4
        assert writer["extra_fields"]["tether"]["agent"] == "writer"
        answer = bytes(writer["responses"]).decode()
        assert answer in ("good", "bad") and writer["response_mask"] == [1] * len(answer)
        assert writer["rollout_log_probs"] == pytest.approx([FAKE_LOGPROB] * len(answer))
        score = 1.0 if answer == "good" else 0.0
        assert writer["rm_scores"][-1] == score and checker["rm_scores"][-1] == score  # the rollout's reward
        assert bytes(checker["responses"]).decode() == "fine"
        assert b'"content":"write"' in bytes(writer["prompts"])  # the fake's prompt ids: the request's JSON

    data = verl_advantages(keys, [_row_tensors(r) for r in rows], 2)
    for i, key in enumerate(keys):
        advantages = data.batch["advantages"][i][data.batch["response_mask"][i].bool()].tolist()
        if key.endswith("_0"):
            assert advantages == []  # the checker's row: nothing trained
        else:
            sign = 1.0 if bytes(by_key[key]["responses"]).decode() == "good" else -1.0
            assert advantages == pytest.approx([sign * 0.7071] * len(advantages), abs=1e-3)


def _unstack(fields: Any) -> list[dict[str, Any]]:
    """The rows of the TensorDict verl's worker stores, as plain lists."""
    out = []
    for i in range(fields.batch_size[0]):
        row: dict[str, Any] = {}
        for key in ("prompts", "responses", "response_mask", "rollout_log_probs", "rm_scores"):
            row[key] = fields[key][i].tolist()
        row["extra_fields"] = fields["extra_fields"][i] if "extra_fields" in fields.keys() else {}
        row["uid"] = fields["uid"][i]
        out.append(row)
    return out


def _row_tensors(row: dict[str, Any]) -> dict[str, Any]:
    import torch

    return {
        "uid": row["uid"],
        "prompts": torch.tensor(row["prompts"]),
        "responses": torch.tensor(row["responses"]),
        "response_mask": torch.tensor(row["response_mask"]),
        "rm_scores": torch.tensor(row["rm_scores"]),
    }
