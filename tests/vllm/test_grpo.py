"""GRPO trains a LoRA policy that a real vLLM server samples: ``Trainer(model="vllm:<path>",
algorithm=GRPO(lora=...))`` on the toy letter task, as a user on one GPU runs it.

After each update the adapter is swapped into the running server; the next step's rollouts come from it: they
record its version (nothing is stale) and the trainer's logprobs of their tokens match the server's (drift
near zero), which could not hold if the server still sampled an older adapter. The run's checkpoint is the
adapter in PEFT format; merged into its base it computes what the trainer's copy does, not what the base does.

The adapter sits on the last decoder layer only (``LoRA(layers=1)``: PEFT writes ``layers_to_transform`` and
that layer's weights, which vLLM loads as they are); adapters on every layer are served and swapped in
``test_serving.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import openai
import torch

import tether
from tether.models.lora import merge
from tether.testing.vllm_checkpoint import letter_reward, letter_tasks

STEPS = 6

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)


def pick_letter(task: str) -> str:
    """The user's agent: one chat call through a client built at import with a hard-coded URL."""
    reply = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


def _first_token_logprobs(model_dir: Path, prompt_ids: list[int], letters: list[int]) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids])).logits[0, -1]
    return torch.log_softmax(logits, dim=-1)[letters]


def test_grpo_trains_a_lora_policy_that_vllm_samples(checkpoint: Path, tmp_path: Path) -> None:
    algorithm = tether.GRPO(group_size=8, tasks_per_step=4, lr=5e-3, lora=tether.LoRA(r=8, alpha=16, layers=1))
    trainer = tether.Trainer(
        model=f"vllm:{checkpoint}",
        algorithm=algorithm,
        n_runners=8,
        steps=STEPS,
        eval_every=STEPS,
        run_root=str(tmp_path),
        name="vllm",
        progress=False,
        sampling={"max_tokens": 4},
        seed=1,
    )
    result = trainer.fit(tether.wrap(pick_letter, reward=letter_reward), train=letter_tasks(16))
    train = [h for h in result.history if h["kind"] == "train"]
    assert len(train) == STEPS and all(h["failed"] == 0 and h["trained_transitions"] > 0 for h in train)
    # every step trained on rollouts of the adapter being updated (its version on every one of them, and the
    # server's logprobs are the trainer's): the previous update had reached the server
    assert all(h["stale_dropped"] == 0 and h["drift_tokens"] == h["response_tokens"] for h in train), train
    assert max(h["drift_max"] for h in train) < 1e-3, [h["drift_max"] for h in train]

    adapter = tmp_path / "vllm" / "checkpoint"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (adapter / "adapter_model.safetensors").is_file()
    assert config["base_model_name_or_path"] == str(checkpoint) and config["layers_to_transform"] == [1]
    merged = merge(adapter, tmp_path / "merged")
    from transformers import AutoTokenizer

    from tether.models.embedded import template

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    prompt = tokenizer.encode(template.render([{"role": "user", "content": "Pick a letter, round 999."}], None))
    letters = tokenizer.convert_tokens_to_ids(list("abcdefgh"))
    before = _first_token_logprobs(checkpoint, prompt, letters).exp()
    after = _first_token_logprobs(merged, prompt, letters).exp()
    assert after[:2].sum() > before[:2].sum() + 0.05, (before, after)  # "a" and "b" became likelier
