"""The trainer's half of LoRA training against a serving engine: a base checkpoint in torch with one PEFT
adapter per policy, each written in PEFT's format after an update (for vLLM to load) and read back on resume.

All policies share one base model (a ``peft.PeftModel`` holding named adapters, so a 7B base is in memory
once); ``activate(name)`` makes one adapter the active, trainable one. Device and dtype follow
``tether.models._device`` (CUDA and bf16 when there is a GPU, CPU and float32 otherwise). torch,
transformers and peft are imported here: this module is loaded only when LoRA training is set up.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from tether.models._device import pick_device, pick_dtype
from tether.models._quiet import quiet
from tether.models.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, LoRA, attach, require_peft, seeded_init


class AdapterPolicies:
    """The checkpoint at ``path`` loaded in torch, with a fresh LoRA adapter (``loras[name]``) per policy.

    Fresh adapters compute exactly what the base does (PEFT starts ``B`` at zero), so version 0 of every
    policy is the starting model.
    """

    def __init__(
        self,
        path: str,
        loras: Mapping[str, LoRA],
        *,
        device: str | None = None,
        dtype: str | torch.dtype | None = None,
    ) -> None:
        if not loras:
            raise ValueError("AdapterPolicies needs at least one policy: {name: tether.LoRA(...)}")
        require_peft()  # the install hint before any loading
        self.path = path
        self.device = pick_device(device)
        self.dtype = pick_dtype(self.device, dtype)
        self.tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(path, local_files_only=True)
        with quiet():
            base: Any = AutoModelForCausalLM.from_pretrained(path, dtype=self.dtype, local_files_only=True)
        base = base.to(self.device)
        names = list(loras)
        # PEFT names its first adapter "default"; the others get names that cannot collide with it
        self._peft_names = {name: "default" if i == 0 else f"tether_{i}" for i, name in enumerate(names)}
        self.model: Any = attach(base, loras[names[0]])  # the first adapter drawn from seed 0 (``attach``)
        for i, name in enumerate(names[1:], start=1):
            # each later adapter from its own fixed seed, never from the process's global generator: else the
            # starting adapters (and so the whole run) depend on whatever drew random numbers before
            with seeded_init(i):
                self.model.add_adapter(self._peft_names[name], loras[name].peft_config(base))
        self.loras = dict(loras)
        self.activate(names[0])
        self.model.eval()

    @property
    def names(self) -> list[str]:
        return list(self._peft_names)

    def _peft(self, name: str) -> str:
        try:
            return self._peft_names[name]
        except KeyError:
            raise KeyError(f"unknown policy {name!r}: the trained adapters are {self.names}") from None

    def activate(self, name: str) -> Any:
        """Make ``name``'s adapter the active, trainable one (the others frozen); returns the model."""
        self.model.set_adapter(self._peft(name))
        return self.model

    def save(self, name: str, directory: str | Path) -> Path:
        """Write ``name``'s adapter to ``directory`` (created if missing) in PEFT's format, its config naming
        the base checkpoint (so ``tether.models.lora.merge`` finds it). The files are written directly, as
        ``PeftModel.save_pretrained`` writes them less its model card, which took 3/4 of a swap's time."""
        peft = require_peft()
        from safetensors.torch import save_file

        peft_name = self._peft(name)
        where = Path(directory)
        where.mkdir(parents=True, exist_ok=True)
        state = peft.get_peft_model_state_dict(self.model, adapter_name=peft_name)
        tensors = {key: value.detach().to("cpu").contiguous() for key, value in state.items()}
        save_file(tensors, str(where / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        config = self.model.peft_config[peft_name]
        config.save_pretrained(str(where))
        saved = json.loads((where / ADAPTER_CONFIG).read_text())
        saved["base_model_name_or_path"] = self.path
        saved["inference_mode"] = True
        (where / ADAPTER_CONFIG).write_text(json.dumps(saved, indent=2))
        return where

    def load(self, name: str, directory: str | Path) -> None:
        """Replace ``name``'s adapter weights, in place, with those saved in ``directory``."""
        peft = require_peft()
        from safetensors.torch import load_file

        path = Path(directory) / ADAPTER_WEIGHTS
        if not path.is_file():
            raise FileNotFoundError(f"{directory} holds no LoRA adapter ({ADAPTER_WEIGHTS} is missing)")
        state = load_file(str(path), device=str(self.device))
        result = peft.set_peft_model_state_dict(self.model, state, adapter_name=self._peft(name))
        unexpected = getattr(result, "unexpected_keys", None)
        if unexpected:
            raise ValueError(
                f"the adapter in {directory} does not fit policy {name!r} (unexpected keys, e.g. "
                f"{unexpected[0]}): was it trained with a different LoRA setting or base?"
            )

    def logprobs(
        self, name: str | None, prompt_ids: Sequence[int], response_ids: Sequence[int], temperature: float = 1.0
    ) -> list[float]:
        """The log-probability of each response token after ``prompt_ids`` under policy ``name``'s adapter
        (None: the base model, adapters off) at ``temperature``."""
        ids = torch.tensor([[*prompt_ids, *response_ids]], device=self.device)
        if name is not None:
            self.activate(name)
        off = self.model.disable_adapter() if name is None else contextlib.nullcontext()
        with torch.no_grad(), off:
            logits = self.model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
        if temperature > 0 and temperature != 1.0:
            logits = logits / temperature
        picked = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, len(prompt_ids) :, None]).squeeze(-1)
        return [float(x) for x in picked.cpu()]

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad) if pad is not None else 0
