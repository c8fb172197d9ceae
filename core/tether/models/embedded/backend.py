"""``model="embedded"``: the repo's small model served in-process (see ``tether.models.local._backend``).

``EmbeddedBackend()`` builds a fresh default model from the built-in corpus (nothing is downloaded);
``EmbeddedBackend("runs/x/checkpoint")`` loads one saved by ``EmbeddedModel.save``; ``model=`` takes an
``EmbeddedModel`` already in memory (for instance after ``sft``). ``dtype="bf16"`` samples from a bf16 copy of
the float32 weights (``tether.models.local._sample_dtype``: not chosen on its own, the model is too small to gain).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tether.models.embedded import template
from tether.models.embedded.model import EmbeddedModel, create_embedded
from tether.models.local._backend import LocalBackend


class EmbeddedBackend(LocalBackend):
    name = "embedded"

    def __init__(
        self,
        checkpoint_dir: str | None = None,
        *,
        model: EmbeddedModel | None = None,
        device: str = "cpu",
        threads: int | None = None,
        preset: str = "tiny",
        seed: int = 0,
        max_batch_rows: int = 64,
        default_max_tokens: int = 256,
        kv_cache: int | str | None = None,
        dtype: str | None = None,
    ) -> None:
        super().__init__(
            threads=threads,
            max_batch_rows=max_batch_rows,
            default_max_tokens=default_max_tokens,
            kv_cache=kv_cache,
        )
        if model is not None and checkpoint_dir is not None:
            raise ValueError("pass either checkpoint_dir or model, not both")
        if model is None:
            if checkpoint_dir:
                model = EmbeddedModel.load(checkpoint_dir, device=device)
                self.base_dir = str(Path(checkpoint_dir).expanduser().resolve())
            else:
                model = create_embedded(preset=preset, seed=seed, device=device)
                self._fresh = (preset, seed, device)
        self.embedded = model
        self.model = model.model
        self.tokenizer = model.tokenizer
        self._stops = model.stop_token_ids
        self.choose_sample_dtype(device, dtype)

    #: (preset, seed, device) of a model built here from random weights and never trained; None otherwise
    _fresh: tuple[str, int, str] | None = None

    @property
    def stop_token_ids(self) -> list[int]:
        return self._stops

    def refit_tokenizer(self, corpus: Iterable[str]) -> bool:
        """Rebuild a fresh model (built here, untrained, one policy, no adapters) with its tokenizer trained
        on ``corpus`` too, so the agent's own text takes few tokens (``tether.WarmStart`` passes the teacher's
        traffic). Same preset and seed; returns whether it did (any other model is left as it is)."""
        if self._fresh is None or self.weights_version or self.lora is not None or self.policies is not None:
            return False
        preset, seed, device = self._fresh
        with self.weights_lock:
            model = create_embedded(corpus, preset=preset, seed=seed, device=device)
            self.embedded, self.model, self.tokenizer = model, model.model, model.tokenizer
            self._stops = model.stop_token_ids
            self._fresh = None
            self.kv_cache.clear()  # another model at the same version: its KV and copies would be another's
            if self.sampling_copies is not None:
                self.sampling_copies.clear()
        return True

    def load_weights(self, directory: str) -> None:
        """As ``LocalBackend.load_weights``; a fresh model takes the checkpoint's tokenizer too (a resumed run
        whose warm start retrained it: ``refit_tokenizer``)."""
        if self._fresh is None or self.lora is not None or self.policies is not None:
            super().load_weights(directory)
            return
        model = EmbeddedModel.load(directory, device=self._fresh[2])
        with self.weights_lock:
            self.embedded, self.model, self.tokenizer = model, model.model, model.tokenizer
            self._stops = model.stop_token_ids
            self._fresh = None
            self.kv_cache.clear()
            if self.sampling_copies is not None:
                self.sampling_copies.clear()

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        text = template.render(messages, tools)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def render_reply(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, reply: dict[str, Any]
    ) -> list[int]:
        return list(self.tokenizer.encode(template.reply_text(reply), add_special_tokens=False))

    def parse(self, text: str) -> dict[str, Any]:
        return template.parse(text)
