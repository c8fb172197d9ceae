"""Models by name: ``locate("Qwen/Qwen2.5-0.5B-Instruct")`` finds a checkpoint folder as transformers would, for
``hf:``, ``vllm:`` and ``tether.VERL(model=...)``.

In order: a local directory (``~`` expanded); the snapshot in the Hugging Face cache (``$HF_HUB_CACHE``, else
``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``, read when called,
not when huggingface_hub was imported); a download into that cache, unless ``HF_HUB_OFFLINE`` (or
``TRANSFORMERS_OFFLINE``) is set, in which case the error names the model and the ways to make it available.
A download fetches the configs, tokenizer files and weights (safetensors, else PyTorch ``.bin``), not the
other formats a repository may carry (GGUF, ONNX, ...).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

_TRUE = {"1", "true", "yes", "on"}
#: what a transformers checkpoint needs: configs, tokenizer files, chat template, weights
_FILES = ["*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken", "tokenizer*", "*.safetensors"]
# a hub id: "name" or "owner/name", letters, digits, "-", "_", "."
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def offline() -> bool:
    """Whether downloads are off (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set to 1/true/yes/on)."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_cache() -> Path:
    """The Hugging Face hub cache folder, as huggingface_hub computes it from the environment."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def is_hub_id(name: str) -> bool:
    """Whether ``name`` reads as a hub id (``owner/name``) rather than a path."""
    return bool(_HUB_ID.match(name)) and not name.startswith((".", "~"))


def locate(name: str, *, prefix: str = "hf:") -> Path:
    """The folder of the model ``name`` (a local directory or a hub id); ``prefix`` words the errors
    (``"hf:"``, ``"vllm:"``, ``"tether.VERL model="``)."""
    where = Path(name).expanduser()
    if where.is_dir():
        return where
    if not is_hub_id(name):
        raise FileNotFoundError(
            f"{prefix}{name}: no such directory, and not a Hugging Face hub id (owner/name): pass a local "
            "checkpoint directory or a hub id such as Qwen/Qwen2.5-0.5B-Instruct"
        )
    if importlib.util.find_spec("huggingface_hub") is None:
        raise ImportError(
            f'{prefix}{name} is a hub id, and finding it needs huggingface_hub: pip install "tether[embedded]"'
        )
    snapshot = cached(name)
    if snapshot is not None:
        return snapshot
    cache = hub_cache()
    if offline():
        raise FileNotFoundError(
            f"{prefix}{name} is not a local directory nor in the Hugging Face cache ({cache}), and HF_HUB_OFFLINE "
            f"forbids downloading it: run `huggingface-cli download {name}` where there is a network (same "
            "HF_HOME), unset HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, or pass a local checkpoint directory"
        )
    return _download(name, cache, prefix)


def cached(name: str) -> Path | None:
    """The cached snapshot of ``name`` (its ``main`` revision) when it holds a config, else None."""
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(name, cache_dir=hub_cache(), local_files_only=True))
    except Exception:
        return None
    return folder if (folder / "config.json").is_file() else None


def _download(name: str, cache: Path, prefix: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        folder = Path(snapshot_download(name, cache_dir=cache, allow_patterns=_FILES))
        if not any(folder.glob("*.safetensors")):  # an older repository: PyTorch weights only
            folder = Path(snapshot_download(name, cache_dir=cache, allow_patterns=[*_FILES, "*.bin"]))
    except GatedRepoError:
        raise PermissionError(
            f"{prefix}{name} is gated on the Hugging Face hub: accept its terms on huggingface.co and log in "
            "(huggingface-cli login, or set HF_TOKEN)"
        ) from None
    except RepositoryNotFoundError:
        raise FileNotFoundError(
            f"{prefix}{name}: no such model on the Hugging Face hub (nor a local directory): check the id, or log "
            "in (huggingface-cli login) if it is private"
        ) from None
    except (HfHubHTTPError, OSError) as exc:
        raise OSError(
            f"{prefix}{name}: cannot download it from the Hugging Face hub ({exc}): run `huggingface-cli download "
            f"{name}` where there is a network, or pass a local checkpoint directory"
        ) from None
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{prefix}{name} has no config.json on the hub: it is not a transformers model")
    return folder
