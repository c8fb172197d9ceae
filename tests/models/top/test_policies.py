"""A policy per sub-agent on the embedded model, through the real proxy: ``wrap(optimize={policy: [...]})``
routes each sub-agent's calls to its policy's weights, GRPO updates each trained policy on its own calls, the
sub-agent no policy names is served by the frozen start, whose weights stay bit-identical; checkpoints hold
every policy and a run resumes them all; LoRA holds one adapter per policy on one base."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.capture.context import agent_scope  # noqa: E402
from tether.models import ChatRequest  # noqa: E402
from tether.models.embedded import EmbeddedBackend  # noqa: E402
from tether.models.local._backend import LocalBackend  # noqa: E402
from tether.models.remote import RemoteBackend  # noqa: E402
from tether.policies import FROZEN_POLICY  # noqa: E402
from tether.types import Mode  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
GOOD = ("a", "b")
AGENTS = ("writer", "checker", "helper")
POLICIES = {"w": ["writer"], "c": ["checker"]}  # "helper" is named by no policy: frozen


def three_agents(task: str) -> dict[str, str]:
    """Three sub-agents, one call each, named with ``agent_scope`` (the plain-client way)."""
    out = {}
    for name in AGENTS:
        with agent_scope(name):
            reply = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}])
        out[name] = reply.choices[0].message.content or ""
    return out


def reward(task: str, output: dict[str, str]) -> float:
    return float(output["writer"].strip() in GOOD) + float(output["checker"].strip() in GOOD)


def _tasks(n: int, offset: int = 0) -> list[str]:
    return [f"Pick a letter, round {offset + i}." for i in range(n)]


def _trainer(model: LocalBackend | str, run_root: Path, steps: int, **grpo: Any) -> tether.Trainer:
    return tether.Trainer(
        model=model,
        algorithm=tether.GRPO(group_size=8, tasks_per_step=4, lr=3e-3, **grpo),
        n_runners=8,
        steps=steps,
        eval_every=steps,
        seed=1,
        name="policies",
        run_root=str(run_root),
        progress=False,
        sampling={"max_tokens": 4},
    )


def _state(backend: LocalBackend, policy: str) -> dict[str, torch.Tensor]:
    with backend.policy(policy) as model:
        return {name: value.detach().clone() for name, value in model.state_dict().items()}


def _changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[name], value) for name, value in after.items())


def _greedy(backend: LocalBackend, task: str, policy: str | None = None) -> list[int]:
    async def ask() -> list[int]:
        request = ChatRequest(messages=[{"role": "user", "content": task}], temperature=0.0, max_tokens=4)
        request.policy = policy
        result = await backend.chat(request)
        ids = result.choices[0].response_token_ids
        assert ids is not None
        return ids

    return asyncio.run(ask())


def test_two_policies_train_while_the_unnamed_sub_agent_stays_frozen(warm_start: Path, tmp_path: Path) -> None:
    agent = tether.wrap(three_agents, reward=reward, optimize=POLICIES)
    backend = EmbeddedBackend(str(warm_start))
    start = {name: value.detach().clone() for name, value in backend.model.state_dict().items()}
    try:
        trainer = _trainer(backend, tmp_path, steps=3)
        result = trainer.fit(agent, train=_tasks(8))
        assert backend.policies is not None and backend.policies.names == ["w", "c"]
        train = [h for h in result.history if h["kind"] == "train"]
        assert len(train) == 3 and all(h["failed"] == 0 and h["transitions"] == 96 for h in train)
        # one update per policy, reported per policy and in total
        for policy in ("w", "c"):
            assert sum(h[f"trained_transitions/{policy}"] for h in train) > 0
        assert all(
            h["trained_transitions"] == h["trained_transitions/w"] + h["trained_transitions/c"] for h in train
        )
        assert not any(key.endswith(f"/{FROZEN_POLICY}") for h in train for key in h)
        # each policy's calls were sampled by that policy's current weights: nothing stale, and the trainer's
        # logprobs match the sampler's (weights of another policy would differ by far more after an update)
        assert all(h["stale_dropped"] == 0 for h in train)
        drift = [h[f"drift_max/{p}"] for h in train for p in ("w", "c") if f"drift_max/{p}" in h]
        assert len(drift) >= 4 and max(drift) < 1e-3, drift
        # each policy's version counts its updates (read first: a policy() block bumps it)
        for policy in ("w", "c"):
            updates = sum(1 for h in train if h[f"trained_transitions/{policy}"] > 0)
            assert backend.weights_version_of(policy) == updates
        assert backend.weights_version == backend.weights_version_of("w")  # the default policy's
        # the frozen start did not move by one bit; each trained policy did move
        frozen = _state(backend, FROZEN_POLICY)
        assert frozen.keys() == start.keys()
        for name, value in frozen.items():
            assert torch.equal(value, start[name]), name
        for policy in ("w", "c"):
            assert _changed(start, _state(backend, policy)), policy
        assert backend.weights_version_of(FROZEN_POLICY) == 0

        # calls are routed by sub-agent name: transitions record the policy, and the frozen sub-agent's greedy
        # replies are the starting model's
        fresh = EmbeddedBackend(str(warm_start))

        async def greedy_batch() -> Any:
            async with trainer.session(agent, model=backend) as session:
                return await session.run_batch(_tasks(4, offset=100), 1, {"temperature": 0.0}, Mode.VAL)

        batch = asyncio.run(greedy_batch())
        by_agent = {t.agent_name: t.policy for t in batch.transitions}
        assert by_agent == {"writer": "w", "checker": "c", "helper": FROZEN_POLICY}
        assert all(t.trainable == (t.policy != FROZEN_POLICY) for t in batch.transitions)
        helpers = [t for t in batch.transitions if t.agent_name == "helper"]
        assert helpers and all(t.weights_version == 0 for t in helpers)
        for t in helpers:
            task = t.messages[-1]["content"] if t.messages else None
            assert task is not None
            assert list(t.response_token_ids) == _greedy(fresh, task)
        writers = [t for t in batch.transitions if t.agent_name == "writer"]
        assert all(t.weights_version == backend.weights_version_of("w") for t in writers)
        asyncio.run(fresh.close())
    finally:
        asyncio.run(backend.close())


def test_a_checkpoint_holds_every_policy_and_a_run_resumes_them_all(warm_start: Path, tmp_path: Path) -> None:
    agent = tether.wrap(three_agents, reward=reward, optimize=POLICIES)
    backend = EmbeddedBackend(str(warm_start))
    try:
        first = _trainer(backend, tmp_path, steps=1).fit(agent, train=_tasks(4))
    finally:
        asyncio.run(backend.close())
    assert [h["step"] for h in first.history] == [1]
    checkpoint = tmp_path / "policies" / "checkpoint"
    assert (checkpoint / "policies.json").is_file() and (checkpoint / "config.json").is_file()
    for policy in ("w", "c"):
        assert (checkpoint / "policies" / policy / "model.safetensors").is_file()
    # a fresh backend with the same policies reads every one back, bit for bit
    fresh = EmbeddedBackend(str(warm_start))
    fresh.declare_policies(["w", "c"])
    fresh.load_weights(str(checkpoint))
    for policy in ("w", "c", FROZEN_POLICY):
        saved, loaded = _state(backend, policy), _state(fresh, policy)
        assert all(torch.equal(loaded[name], value) for name, value in saved.items()), policy
    # each policy's directory is a plain checkpoint: hf: serves it as that policy computes
    served = tether.models.open_backend(f"hf:{checkpoint / 'policies' / 'w'}")
    assert isinstance(served, LocalBackend)
    assert _greedy(served, "Pick a letter, round 1.") == _greedy(backend, "Pick a letter, round 1.", "w")
    # the wrong kind of checkpoint is refused with the fix
    with pytest.raises(ValueError, match="one set of weights per policy"):
        EmbeddedBackend(str(warm_start)).load_weights(str(checkpoint))
    other = EmbeddedBackend(str(warm_start))
    other.declare_policies(["w"])
    with pytest.raises(ValueError, match=r"holds the policies \['w', 'c'\]"):
        other.load_weights(str(checkpoint))
    resumed = _trainer(f"embedded:{warm_start}", tmp_path, steps=2).fit(agent, train=_tasks(4), resume=True)
    assert [h["step"] for h in resumed.history if h["kind"] == "train"] == [1, 2]


def test_grpo_trains_only_its_policies(warm_start: Path, tmp_path: Path) -> None:
    agent = tether.wrap(three_agents, reward=reward, optimize=POLICIES)
    backend = EmbeddedBackend(str(warm_start))
    start = {name: value.detach().clone() for name, value in backend.model.state_dict().items()}
    try:
        result = _trainer(backend, tmp_path, steps=2, policies=["c"]).fit(agent, train=_tasks(8))
        assert sum(h["trained_transitions/c"] for h in result.history if h["kind"] == "train") > 0
        assert not any("trained_transitions/w" in h for h in result.history)
        assert not _changed(start, _state(backend, "w")) and _changed(start, _state(backend, "c"))
    finally:
        asyncio.run(backend.close())
    with pytest.raises(ValueError, match=r"policies= names \['nope'\].*it has \['w', 'c'\]"):
        _trainer(f"embedded:{warm_start}", tmp_path, steps=1, policies=["nope"]).fit(agent, train=_tasks(4))


def test_a_backend_that_cannot_hold_policies_says_which_can(tmp_path: Path) -> None:
    agent = tether.wrap(three_agents, reward=reward, optimize=POLICIES)
    trainer = _trainer(RemoteBackend("http://127.0.0.1:9/v1"), tmp_path, steps=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"RemoteBackend cannot hold.*'embedded', 'hf:<path>' or 'vllm:<model>'"):
        trainer.fit(agent, train=_tasks(4))
    shared = tether.wrap(three_agents, reward=reward, optimize=["writer"])
    with pytest.raises(ValueError, match="one shared policy"):
        _trainer("embedded", tmp_path, steps=1, policies=["w"]).fit(shared, train=_tasks(4))


def test_a_backend_routes_requests_by_policy(warm_start: Path) -> None:
    backend = EmbeddedBackend(str(warm_start))
    with pytest.raises(tether.models.BadRequest, match="holds one policy"):
        _greedy(backend, "hi", "w")
    backend.declare_policies(["w", "c"])
    backend.declare_policies(["w", "c"])  # the same names again: nothing happens
    with pytest.raises(ValueError, match="already holds the policies"):
        backend.declare_policies(["x"])
    with torch.no_grad(), backend.policy("c") as model:  # only policy "c" changes
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    task = "Pick a letter, round 7."
    base = _greedy(backend, task, FROZEN_POLICY)
    assert _greedy(backend, task) == _greedy(backend, task, "w") == _greedy(backend, task, "policy") == base
    assert backend.weights_version_of("c") == 1 and backend.weights_version == 0
    with pytest.raises(tether.models.BadRequest, match="unknown policy 'zz'"):
        _greedy(backend, task, "zz")
    asyncio.run(backend.close())


def test_lora_holds_one_adapter_per_policy_on_one_base(warm_start: Path, tmp_path: Path) -> None:
    pytest.importorskip("peft")
    from tether.models.hf import HFBackend
    from tether.models.lora import ADAPTER_CONFIG, LoRA

    small = LoRA(r=4, alpha=8)
    agent = tether.wrap(three_agents, reward=reward, optimize=POLICIES)
    backend = HFBackend(str(warm_start))
    start = {name: value.detach().clone() for name, value in backend.model.state_dict().items()}
    task = "Pick a letter, round 5."
    start_ids = _greedy(backend, task)
    try:
        result = _trainer(backend, tmp_path, steps=2, lora=small).fit(agent, train=_tasks(8))
        train = [h for h in result.history if h["kind"] == "train"]
        assert all(sum(h[f"trained_transitions/{p}"] for h in train) > 0 for p in ("w", "c"))
        with backend.policy(FROZEN_POLICY) as model:
            base = {
                n.removeprefix("base_model.model.").replace(".base_layer.", "."): p.detach().clone()
                for n, p in model.named_parameters()
                if "lora_" not in n
            }
        assert base and set(base) <= set(start)  # (tied embeddings: lm_head is no parameter of its own)
        assert all(torch.equal(value, start[name]) for name, value in base.items())  # the base: not one bit
        assert _greedy(backend, task, FROZEN_POLICY) == start_ids  # adapters off: the starting model
        adapters = {}
        for policy in ("w", "c"):
            with backend.policy(policy) as model:
                trainable = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
            assert trainable and all("lora_" in n for n in trainable)
            assert any(bool(p.abs().sum()) for n, p in trainable.items() if "lora_B" in n), policy  # trained
            adapters[policy] = trainable
        assert adapters["w"].keys().isdisjoint(adapters["c"].keys())  # two adapters, not one
        checkpoint = tmp_path / "policies" / "checkpoint"
        for policy in ("w", "c"):
            assert (checkpoint / "policies" / policy / ADAPTER_CONFIG).is_file()
        # hf:<checkpoint>/policies/<name> serves the base with that policy's adapter
        served = tether.models.open_backend(f"hf:{checkpoint / 'policies' / 'c'}")
        assert isinstance(served, LocalBackend)
        assert _greedy(served, task) == _greedy(backend, task, "c")
        # a fresh backend with the same setting and policies resumes every adapter
        fresh = HFBackend(str(warm_start))
        fresh.declare_policies(["w", "c"])
        fresh.attach_lora(small)
        fresh.load_weights(str(checkpoint))
        for policy in ("w", "c"):
            assert _greedy(fresh, task, policy) == _greedy(backend, task, policy)
        asyncio.run(fresh.close())
        asyncio.run(served.close())
    finally:
        asyncio.run(backend.close())
