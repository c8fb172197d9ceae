"""Shared pieces of the verl bridge's tests: verl itself (skipped without it), a tiny transformers checkpoint
verl's config classes and agent-loop worker load (a config and a tokenizer with a chat template, no
weights: nothing here runs the model), and verl's advantage computation fed the way its V1 trainer feeds it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason='the verl bridge tests need verl: tox -e verl (pip install "tether[verl]")')

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Llama-shaped checkpoint folder without weights: config.json and a character-level tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("tiny-model")
    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    chars = sorted(set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;!?'\"{}[]()_-+=*/\n"))
    vocab = {tok: i for i, tok in enumerate([*specials, *chars])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        additional_special_tokens=specials[1:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        pad_token_id=0,
        eos_token_id=vocab["<|im_end|>"],
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(path)
    return path


@pytest.fixture
def verl_advantages() -> Callable[[Sequence[str], Sequence[dict[str, Any]], int], Any]:
    return _verl_advantages


def _verl_advantages(keys: Sequence[str], fields: Sequence[dict[str, Any]], n: int) -> Any:
    """verl's GRPO advantages of stored rows, computed as its V1 trainer's ``_compute_advantage`` does: the
    rows' fields as one TensorDict (``list_of_dict_to_tensordict``, as the agent-loop worker stores them),
    padded, ``rm_scores`` as the token-level rewards, ``uid`` as the group, then
    ``compute_advantage_for_multi_trajectories`` (the last row of each session scored, the result copied to
    the session's rows). Returns the DataProto with ``advantages``."""
    import numpy as np
    from verl.protocol import DataProto
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    wanted = ("uid", "response_mask", "rm_scores", "responses", "prompts")
    stored = list_of_dict_to_tensordict([{k: f[k] for k in wanted} for f in fields])
    uids = list(stored.pop("uid"))
    data = DataProto(batch=stored.to_padded_tensor())
    data.batch["token_level_scores"] = data.batch["rm_scores"]
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data.non_tensor_batch["uid"] = np.array([str(u) for u in uids], dtype=object)
    return compute_advantage_for_multi_trajectories(
        data, batch_keys=list(keys), adv_estimator=AdvantageEstimator.GRPO, num_repeat=n
    )
