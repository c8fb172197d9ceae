"""The locally trained byte-level BPE tokenizer: exact round trips, digits one by one, markers as one token."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from tether.models.embedded import EmbeddedModel, template
from tether.models.embedded.tokenizer import train_tokenizer

TEXTS = [
    "plain ascii text",
    "  leading and trailing spaces  ",
    "tabs\tand\nnewlines\r\n",
    "héllo wörld — ünïcödé ✓ 日本語のテキスト 🎉👩‍👩‍👧",
    "\x00\x01 control \x7f chars",
    'json {"a": [1, 2.5e-3, null], "b": "\\u00e9"}',
    "",
]


@pytest.mark.parametrize("text", TEXTS)
def test_any_text_round_trips(nano: EmbeddedModel, text: str) -> None:
    ids = nano.tokenizer.encode(text, add_special_tokens=False)
    assert nano.tokenizer.decode(ids) == text


def test_digits_are_split_one_by_one(nano: EmbeddedModel) -> None:
    tok = nano.tokenizer
    ids = tok.encode("x=1234567890", add_special_tokens=False)
    pieces = [tok.decode([i]) for i in ids]
    assert pieces[-10:] == list("1234567890")


def test_markers_are_single_tokens_and_call_survives_skip_special(nano: EmbeddedModel) -> None:
    tok = nano.tokenizer
    for marker in template.MARKERS:
        assert len(tok.encode(marker, add_special_tokens=False)) == 1, marker
    ids = tok.encode('<|call|>calc{"expr":"1+2"}<|end|>', add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == '<|call|>calc{"expr":"1+2"}'


def test_vocab_is_small_and_bounded() -> None:
    tok = train_tokenizer(["some words " * 50], vocab_size=400)
    assert 256 < len(tok) <= 400 + 1  # +1: the call marker is added after training
    with pytest.raises(ValueError, match="too small"):
        train_tokenizer(["x"], vocab_size=100)


def test_tokenizer_reloads_with_autotokenizer(nano: EmbeddedModel, nano_dir: object) -> None:
    tok = AutoTokenizer.from_pretrained(nano_dir)
    text = template.render([{"role": "user", "content": "What is 3+4? ünï"}])
    assert tok.encode(text, add_special_tokens=False) == nano.tokenizer.encode(text, add_special_tokens=False)
    assert tok.chat_template == template.JINJA
