"""GRPO with LoRA on ``hf:`` in bfloat16 — on CUDA where a GPU exists (skipped without one), and on CPU sampling
in bfloat16 (a copy of the float32 weights that train) and float32 everywhere: a randomly initialised small
Llama written by the test (no download),
sampled, one GRPO update, and checked for device placement, dtype, a finite loss, a changed adapter with the
base untouched, and the served model swapped to the new adapter (its version, its logprobs)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from tether.algorithms.grpo import GRPO  # noqa: E402
from tether.models import ChatRequest  # noqa: E402
from tether.models.hf import HFBackend  # noqa: E402
from tether.models.lora import LoRA  # noqa: E402
from tether.testing import tiny_llama  # noqa: E402
from tether.types import Transition  # noqa: E402

CUDA = torch.cuda.is_available()
QUESTION = [{"role": "user", "content": "hello world"}]


def _transitions(result: object, rewarded: int) -> list[Transition]:
    choices = result.choices  # type: ignore[attr-defined]
    mean = 1 / len(choices)
    return [
        Transition(
            rollout_id=f"r{i}",
            attempt_id="a",
            task_id="t",
            agent_name="agent",
            step=0,
            messages=QUESTION,
            response=c.message,
            prompt_token_ids=result.prompt_token_ids,  # type: ignore[attr-defined]
            response_token_ids=c.response_token_ids,
            logprobs=c.logprobs,
            reward=float(i == rewarded),
            trainable=True,
            advantage=float(i == rewarded) - mean,
            weights_version=result.weights_version,  # type: ignore[attr-defined]
        )
        for i, c in enumerate(choices)
    ]


async def _lora_round(path: Path, device: str | None, dtype: str | None) -> tuple[str, torch.dtype]:
    backend = HFBackend(str(path), device=device, dtype=dtype)
    backend.attach_lora(LoRA(r=8, alpha=16))
    params = dict(backend.model.named_parameters())  # read, not updated: no policy() block (it bumps the version)
    adapters = {n: p for n, p in params.items() if "lora_" in n}
    base = {n: p.detach().clone() for n, p in params.items() if "lora_" not in n}
    assert adapters and all(p.requires_grad for p in adapters.values())
    assert all(p.device.type == backend.device.split(":")[0] for p in params.values())
    assert all(p.dtype == backend.dtype for p in base.values())
    before = {n: p.detach().clone() for n, p in adapters.items()}

    sampled = await backend.chat(ChatRequest(messages=QUESTION, n=4, temperature=1.0, max_tokens=8, seed=0))
    version = sampled.weights_version
    assert version == backend.weights_version
    batch = _transitions(sampled, rewarded=0)
    with backend.policy() as model:
        metrics = GRPO(group_size=4, lr=5e-2).update(
            model, batch, pad_token_id=backend.pad_token_id, weights_version=backend.weights_version
        )
    assert metrics["trained_transitions"] == 4 and torch.isfinite(torch.tensor(metrics["loss"]))
    assert torch.isfinite(torch.tensor(metrics["grad_norm"])) and metrics["grad_norm"] > 0
    after = dict(backend.model.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in adapters)  # the adapter moved
    assert all(torch.equal(base[n], after[n]) for n in base)  # the base did not

    # the served model is the updated one: a new version, and the rewarded reply more likely than before
    rewarded = batch[0].response_token_ids
    again = await backend.chat(ChatRequest(messages=QUESTION, n=1, temperature=1.0, max_tokens=8, seed=1))
    assert version is not None and again.weights_version == version + 1
    with torch.no_grad():
        ids = torch.tensor([list(sampled.prompt_token_ids or []) + list(rewarded)], device=backend.device)
        logits = backend.model(input_ids=ids).logits[0, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    new = float(logp[-len(rewarded) :].sum())
    assert new > sum(batch[0].logprobs or []), (new, batch[0].logprobs)
    await backend.close()
    return backend.device, backend.sample_dtype


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
async def test_grpo_lora_on_hf_in_bf16_on_cuda(tmp_path: Path) -> None:
    path = tiny_llama.write(tmp_path / "llama", hidden_size=64, layers=2)
    device, dtype = await _lora_round(path, None, None)  # the defaults on a GPU machine
    assert device == "cuda" and dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
async def test_the_same_path_on_cpu(tmp_path: Path, dtype: str) -> None:
    path = tiny_llama.write(tmp_path / "llama", hidden_size=64, layers=2)
    device, picked = await _lora_round(path, "cpu", dtype)  # (the weights train in float32 on a CPU either way)
    assert device == "cpu" and picked == getattr(torch, dtype)
