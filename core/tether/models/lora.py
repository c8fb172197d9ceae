"""LoRA adapters (PEFT) on the models tether trains: ``tether.LoRA`` says how, the functions here do it.

``LoRA`` is a plain setting (importing this module loads neither torch nor peft). ``attach`` wraps a
transformers causal LM in PEFT LoRA adapters so only the adapters train; ``save_adapter`` writes them in
PEFT's format (``adapter_config.json`` + ``adapter_model.safetensors``), which vLLM's
``/v1/load_lora_adapter`` and ``peft.PeftModel.from_pretrained`` both read; ``load_adapter_weights`` puts
saved adapter weights back into an attached model in place; ``merge`` folds an adapter into its base and
writes an ordinary transformers checkpoint directory. peft is imported on first use: ``pip install
"tether[lora]"``.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the files a PEFT adapter directory holds
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass(frozen=True)
class LoRA:
    """Low-rank adapters on a model's linear layers: ``r`` (rank), ``alpha`` (scale ``alpha / r``),
    ``dropout``, ``target_modules`` (``"all-linear"``: every linear layer but the output head; or module
    names such as ``("q_proj", "v_proj")``) and ``layers``: which decoder layers get adapters (None: all; an
    int ``n``: the last ``n``; or layer indices). Adapters on the upper layers only make an update cheaper:
    the backward pass stops at the lowest adapted layer (on SmolLM2-135M, the last 10 of 30 layers cut a
    training row's CPU time by about a third)."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str | Sequence[str] = "all-linear"
    layers: int | Sequence[int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"LoRA rank r must be a positive integer, got {self.r!r}")
        if self.alpha <= 0:
            raise ValueError(f"LoRA alpha must be positive, got {self.alpha!r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.target_modules, str):
            modules = tuple(self.target_modules)
            if not modules or not all(isinstance(m, str) and m for m in modules):
                raise ValueError(f"target_modules must be 'all-linear' or module names, got {modules!r}")
            object.__setattr__(self, "target_modules", modules)
        if isinstance(self.layers, bool) or (isinstance(self.layers, int) and self.layers < 1):
            raise ValueError(
                f"LoRA layers must be a positive count (the last n layers) or indices, got {self.layers!r}"
            )
        if self.layers is not None and not isinstance(self.layers, int):
            indices = tuple(self.layers)
            if not indices or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices):
                raise ValueError(f"LoRA layers must be a positive count or layer indices (>= 0), got {indices!r}")
            object.__setattr__(self, "layers", tuple(sorted(set(indices))))

    def layer_indices(self, num_layers: int | None) -> list[int] | None:
        """The decoder layers that get adapters in a model of ``num_layers`` layers (None: all of them)."""
        if self.layers is None:
            return None
        if isinstance(self.layers, int):
            if num_layers is None:
                raise ValueError(
                    f"LoRA(layers={self.layers}) needs the model's layer count (config.num_hidden_layers)"
                )
            return list(range(max(0, num_layers - self.layers), num_layers))
        if num_layers is not None and max(self.layers) >= num_layers:
            raise ValueError(f"LoRA layers {list(self.layers)}: this model has layers 0-{num_layers - 1}")
        return list(self.layers)

    @classmethod
    def from_adapter_dir(cls, directory: str | Path) -> LoRA:
        """The setting a saved adapter was trained with (its ``adapter_config.json``)."""
        config = _read_config(directory)
        modules = config.get("target_modules") or "all-linear"
        return cls(
            r=int(config.get("r", 8)),
            alpha=config.get("lora_alpha", 8),
            dropout=float(config.get("lora_dropout", 0.0)),
            target_modules=modules if isinstance(modules, str) else tuple(sorted(modules)),
            layers=_saved_layers(config.get("layers_to_transform")),
        )

    def peft_config(self, model: Any = None) -> Any:
        """This setting as a ``peft.LoraConfig`` for a causal LM (``model``: the one it attaches to, whose layer
        count ``layers=n`` needs)."""
        peft = require_peft()
        modules = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        config = getattr(model, "config", None)
        layers = self.layer_indices(getattr(config, "num_hidden_layers", None))
        if layers is not None and modules == "all-linear":  # (peft takes layer indices with module names only)
            modules = _linear_names(model)
        return peft.LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=modules,
            task_type="CAUSAL_LM",
            layers_to_transform=layers,
        )


def _linear_names(model: Any) -> list[str]:
    """The names of ``model``'s linear layers inside its decoder layers (``"all-linear"`` spelt out). A model
    that already holds adapters (a second policy's added beside the first) counts each adapted layer once, by
    its own name, and not the linear layers PEFT put inside it (``base_layer``, ``lora_A.default``, ...)."""
    import torch

    if model is None:
        raise ValueError(
            "LoRA(layers=...) with target_modules='all-linear' needs the model to find its linear layers"
        )
    tuner_layer = require_peft().tuners.tuners_utils.BaseTunerLayer
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    names: set[str] = set()
    adapted: list[str] = []  # the adapted layers' prefixes (named_modules lists a module before its parts)
    for name, module in model.named_modules():
        if any(name.startswith(prefix) for prefix in adapted):
            continue
        if isinstance(module, tuner_layer):
            adapted.append(name + ".")
        elif not isinstance(module, torch.nn.Linear) or module is head:
            continue
        names.add(name.rsplit(".", 1)[-1])
    return sorted(names)


def _saved_layers(saved: Any) -> tuple[int, ...] | None:
    """``layers_to_transform`` as an adapter's config saves it (None, one index or a list) → ``LoRA.layers``."""
    if saved is None:
        return None
    return (int(saved),) if isinstance(saved, int) else tuple(int(i) for i in saved)


def require_peft() -> Any:
    """The ``peft`` module, or an ImportError that names the extra to install."""
    try:
        import peft
    except ImportError:
        raise ImportError('LoRA needs peft: pip install "tether[lora]"') from None
    return peft


def attach(model: Any, lora: LoRA) -> Any:
    """``model`` wrapped in fresh LoRA adapters (a ``peft.PeftModel``): the base weights frozen, the adapters
    trainable and initialised so the wrapped model computes exactly what ``model`` did."""
    peft = require_peft()
    try:
        with _quiet_peft(), seeded_init(0):
            return peft.get_peft_model(model, lora.peft_config(model))
    except ValueError as exc:  # e.g. target modules not found in this architecture
        raise ValueError(f"cannot attach {lora} to {type(model).__name__}: {exc}") from exc


@contextlib.contextmanager
def seeded_init(index: int) -> Iterator[None]:
    """Fresh adapters drawn from a fixed seed (``index``: which adapter), not from wherever the process's global
    generator happens to be: a seeded run starts from the same adapters whatever ran before it in the process."""
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(index)
        yield


@contextlib.contextmanager
def _quiet_peft() -> Iterator[None]:
    """Without the FutureWarning transformers 5 raises when peft reads ``model.is_gradient_checkpointing``."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def is_adapter_dir(directory: str | Path) -> bool:
    """Whether ``directory`` holds a PEFT adapter (as ``save_adapter`` writes it)."""
    return (Path(directory) / ADAPTER_CONFIG).is_file()


def _read_config(directory: str | Path) -> dict[str, Any]:
    if not is_adapter_dir(directory):
        raise FileNotFoundError(f"{directory} holds no LoRA adapter ({ADAPTER_CONFIG} is missing)")
    config: dict[str, Any] = json.loads((Path(directory) / ADAPTER_CONFIG).read_text())
    return config


def base_of(adapter_dir: str | Path) -> Path:
    """The base checkpoint directory an adapter records (a relative path is relative to the adapter's
    directory: a base saved beside it), or FileNotFoundError naming the fix."""
    recorded = _read_config(adapter_dir).get("base_model_name_or_path")
    if recorded:
        beside = Path(adapter_dir) / recorded
        for candidate in (beside, Path(recorded)):
            if (candidate / "config.json").is_file():
                return candidate
        from tether.models._hub import cached, is_hub_id

        snapshot = cached(recorded) if is_hub_id(recorded) else None  # a base recorded by its hub id
        if snapshot is not None:
            return snapshot
    raise FileNotFoundError(
        f"the base checkpoint {recorded!r} of the adapter in {adapter_dir} is not a local directory: "
        "pass the base explicitly (tether merge ... --base <checkpoint dir>, merge(..., base=...))"
    )


def save_adapter(
    model: Any, directory: str | Path, *, base: str | None = None, adapter_name: str = "default"
) -> Path:
    """Write the adapter ``adapter_name`` of an attached model (a ``peft.PeftModel``) to ``directory`` in PEFT's
    format. ``base`` (the base checkpoint's path) is recorded in the config so ``merge`` can find it."""
    where = Path(directory)
    where.mkdir(parents=True, exist_ok=True)
    if adapter_name == "default" and len(model.peft_config) == 1:
        model.save_pretrained(str(where), safe_serialization=True)
    else:  # (PEFT's save_pretrained writes every adapter, a named one into a subfolder of its own)
        from safetensors.torch import save_file

        state = require_peft().get_peft_model_state_dict(model, adapter_name=adapter_name)
        tensors = {key: value.detach().to("cpu").contiguous() for key, value in state.items()}
        save_file(tensors, str(where / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        model.peft_config[adapter_name].save_pretrained(str(where))
    if base is not None:
        config_path = where / ADAPTER_CONFIG
        config = json.loads(config_path.read_text())
        config["base_model_name_or_path"] = base
        config_path.write_text(json.dumps(config, indent=2))
    return where


def load_adapter_weights(model: Any, directory: str | Path, *, adapter_name: str = "default") -> None:
    """Replace the weights of the adapter ``adapter_name`` of an attached model, in place, with those saved in
    ``directory``."""
    peft = require_peft()
    from safetensors.torch import load_file

    path = Path(directory) / ADAPTER_WEIGHTS
    if not path.is_file():
        raise FileNotFoundError(f"{directory} holds no LoRA adapter ({ADAPTER_WEIGHTS} is missing)")
    result = peft.set_peft_model_state_dict(model, load_file(str(path)), adapter_name=adapter_name)
    unexpected = getattr(result, "unexpected_keys", None)
    if unexpected:
        raise ValueError(
            f"the adapter in {directory} does not fit this model (unexpected keys, e.g. {unexpected[0]}): "
            "was it trained with a different LoRA setting or base?"
        )


def merge(adapter_dir: str | Path, out_dir: str | Path, *, base: str | Path | None = None) -> Path:
    """Fold the adapter in ``adapter_dir`` into its base model and write a plain transformers checkpoint
    (weights and tokenizer) to ``out_dir``. ``base`` defaults to the path the adapter's config records."""
    peft = require_peft()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not is_adapter_dir(adapter_dir):
        raise FileNotFoundError(f"{adapter_dir} holds no LoRA adapter ({ADAPTER_CONFIG} is missing)")
    if base is None:
        base = base_of(adapter_dir)
    elif not (Path(base) / "config.json").is_file():
        raise FileNotFoundError(f"base {str(base)!r} is not a local transformers checkpoint (no config.json)")
    from tether.models._quiet import quiet

    with quiet(), _quiet_peft():
        model = AutoModelForCausalLM.from_pretrained(str(base), local_files_only=True)
        merged = peft.PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
        out = Path(out_dir)
        merged.save_pretrained(str(out))
    tokenizer_source = Path(adapter_dir) if (Path(adapter_dir) / "tokenizer_config.json").is_file() else base
    AutoTokenizer.from_pretrained(str(tokenizer_source), local_files_only=True).save_pretrained(str(out))
    return out
