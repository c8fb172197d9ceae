"""``VLLMBackend``: start a vLLM OpenAI server as a subprocess, ask it for token ids, stop it on close.

vLLM needs a GPU and is not a dependency: nothing here imports it. ``start`` runs ``vllm serve <model>`` on a
loopback port, waits until ``/health`` answers 200 (failing early, with the server's log tail, if the process
exits or the wait times out), then forwards every chat request through ``RemoteBackend`` with
``return_token_ids`` (vLLM returns ``prompt_token_ids`` and per-choice ``token_ids``) and ``logprobs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import aiohttp

from tether.models.base import BackendError, ChatRequest, ChatResult, ModelBackend
from tether.models.remote import RemoteBackend


class VLLMBackend(ModelBackend):
    """A vLLM server for ``model`` (a hub id or a local checkpoint path), owned by this backend.

    ``command`` is the program to run instead of ``vllm`` (tests use a stand-in). ``tool_call_parser``
    (e.g. ``"hermes"``) turns on vLLM's tool calling for models that need it. ``extra_args`` are appended
    to the command line as given. The server's output goes to ``log_path``; without one, to a temporary file
    that a clean ``close()`` removes and a failed start keeps (the error names it).
    """

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        gpu_memory_utilization: float = 0.85,
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
    ) -> None:
        if not model:
            raise ValueError('VLLMBackend needs a model: "vllm:<hub id or checkpoint path>"')
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        self.model = model
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
        self.log_path = Path(log_path) if log_path else None
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self._remote: RemoteBackend | None = None
        self._log_file: IO[bytes] | None = None
        self._temp_log = False  # a log file we made: removed on a clean close, kept when a start fails

    # -- command line -------------------------------------------------------------------------------------

    def executable(self) -> list[str]:
        """The program that runs vLLM: ``command`` if given, else ``vllm`` next to this Python or on PATH."""
        if self.command:
            return list(self.command)
        beside = Path(sys.executable).with_name("vllm")
        if beside.exists():
            return [str(beside)]
        found = shutil.which("vllm")
        if found is None:
            raise BackendError(
                "vLLM is not installed (no `vllm` executable next to this Python or on PATH): install vLLM on a "
                'GPU machine (pip install vllm), or use model="embedded" / an http(s):// URL'
            )
        return [found]

    def build_command(self, port: int) -> list[str]:
        """The full argv of ``vllm serve`` for this backend on ``port``."""
        argv = [*self.executable(), "serve", self.model, "--host", self.host, "--port", str(port)]
        argv += ["--served-model-name", self.served_model_name]
        argv += ["--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}"]
        if self.max_model_len is not None:
            argv += ["--max-model-len", str(self.max_model_len)]
        if self.dtype:
            argv += ["--dtype", self.dtype]
        if self.seed is not None:
            argv += ["--seed", str(self.seed)]
        if self.tool_call_parser:
            argv += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        return argv + self.extra_args

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the vLLM server is not started")
        return f"http://{self.host}:{self.port}/v1"

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._remote is not None:
            return
        if self.port is None:
            self.port = _free_port(self.host)
        argv = self.build_command(self.port)
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="tether-vllm-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
            self._temp_log = True
        log_file = open(self.log_path, "ab")
        self._log_file = log_file
        try:
            self.process = subprocess.Popen(
                argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})},
                start_new_session=True,  # its own process group: close() stops vLLM's workers too
            )
        except OSError as exc:
            log_file.close()
            raise BackendError(f"cannot start vLLM ({' '.join(argv)}): {exc}") from None
        try:
            await self._wait_healthy()
        except BaseException:
            self._temp_log = False  # the error names this log: it is the user's to read now
            await self._stop_process()
            raise
        remote = RemoteBackend(self.base_url, model=self.served_model_name, return_token_ids=True, logprobs=True)
        await remote.start()
        self._remote = remote

    async def _wait_healthy(self) -> None:
        assert self.process is not None
        url = f"http://{self.host}:{self.port}/health"
        deadline = time.monotonic() + self.startup_timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise BackendError(
                        f"the vLLM server exited with code {code} before it was ready; its log "
                        f"({self.log_path}) ends with:\n{self.log_tail()}"
                    )
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            return
                if time.monotonic() >= deadline:
                    raise BackendError(
                        f"the vLLM server did not become healthy at {url} within {self.startup_timeout_s:g} s "
                        f"(raise startup_timeout_s for big models); its log ({self.log_path}) ends with:\n"
                        f"{self.log_tail()}"
                    )
                await asyncio.sleep(0.25)

    async def close(self) -> None:
        if self._remote is not None:
            remote, self._remote = self._remote, None
            await remote.close()
        await self._stop_process()
        if self._temp_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path, self._temp_log = None, False

    async def _stop_process(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            _signal_group(process, signal.SIGTERM)
            deadline = time.monotonic() + self.stop_timeout_s
            while process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if process.poll() is None:
                _signal_group(process, signal.SIGKILL)
                await asyncio.to_thread(process.wait)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:]) or "(empty log)"

    async def chat(self, request: ChatRequest) -> ChatResult:
        if self._remote is None:
            raise BackendError("the vLLM backend is not started: call `await backend.start()` first")
        return await self._remote.chat(request)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)  # the child leads its own group (start_new_session)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
