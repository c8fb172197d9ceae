"""The embedded model's tokenizer: byte-level BPE trained locally from text (nothing is downloaded).

Byte-level, so any text round-trips exactly; digits are split one by one (arithmetic stays learnable); the
chat markers are single tokens. The result is a ``PreTrainedTokenizerFast`` that saves and reloads with
``AutoTokenizer.from_pretrained``.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from tether.models.embedded import template


def train_tokenizer(corpus: Iterable[str], *, vocab_size: int = 768) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``corpus`` (plus the chat template's own sample turns).

    ``vocab_size`` is an upper bound: a small corpus yields fewer merges.
    """
    if vocab_size < 300:
        raise ValueError(f"vocab_size={vocab_size} is too small: byte-level BPE needs at least 256 + markers")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False) for t in (*template.TURN_TOKENS, template.PAD)]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [*corpus, *template.sample_texts()]
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    # CALL is a plain added token: one id, but kept by decode(skip_special_tokens=True)
    tok.add_tokens([AddedToken(template.CALL, special=False, normalized=False)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=template.END,
        pad_token=template.PAD,
        clean_up_tokenization_spaces=False,
        model_max_length=2048,
    )
    fast.chat_template = template.JINJA
    return fast
