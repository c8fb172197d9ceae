"""A tiny randomly initialised Llama checkpoint for tests (nothing downloaded): ``write(path)`` saves one with
its own byte-level BPE tokenizer (trained on a few words) and a ChatML template with Hermes tool calls, as
``model="hf:<path>"`` serves it."""

from __future__ import annotations

from pathlib import Path

CHATML = (
    "{%- if tools %}<|im_start|>system\nTools:\n{%- for t in tools %}\n{{ t.function | tojson }}{%- endfor %}"
    '\nCall one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{%- endif %}'
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{{ {'name': c.function.name, 'arguments': c.function.arguments}"
    " | tojson }}</tool_call>{%- endfor %}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def write(path: str | Path, *, seed: int = 0, hidden_size: int = 32, layers: int = 1) -> Path:
    """Save the checkpoint into ``path`` (created) and return it."""
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True) for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>")]
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["hello world, the tool call answer is 42"] * 20, trainer=trainer)
    tok.add_tokens([AddedToken("<tool_call>"), AddedToken("</tool_call>")])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=fast.eos_token_id,
    )
    torch.manual_seed(seed)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    LlamaForCausalLM(config).save_pretrained(out)
    fast.save_pretrained(out)
    return out
