"""A model server run as a child process: started in its own process group with its output in a log file,
waited on until its health URL answers 200, and stopped with its workers (SIGTERM to the group, then SIGKILL).

The log is the given path, or a temporary file that a clean ``stop`` removes and a failed start keeps: the
error names it and quotes its tail. Used by the vLLM backend; nothing here knows about vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

import aiohttp

from tether.models.base import BackendError


class ServerProcess:
    """``argv`` run with ``env``; ``label`` names it in errors (``"the vLLM server"``)."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        label: str,
        log_path: Path | None = None,
        startup_timeout_s: float = 900.0,
        stop_timeout_s: float = 30.0,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.label = label
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._temp_log = False  # a log file we made: removed on a clean stop, kept when a start fails

    async def start(self, health_url: str) -> None:
        """Run the program and wait until ``health_url`` answers 200; on failure, stop it and raise a
        ``BackendError`` that names the log and quotes its tail (the log is then kept)."""
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="tether-vllm-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
            self._temp_log = True
        log_file = open(self.log_path, "ab")
        self._log_file = log_file
        try:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,  # its own process group: stop() ends its workers too
            )
        except OSError as exc:
            log_file.close()
            self._log_file = None
            raise BackendError(f"cannot start {self.label} ({' '.join(self.argv)}): {exc}") from None
        try:
            await self._wait_healthy(health_url)
        except BaseException:
            self.keep_log()
            await self.stop()
            raise

    def keep_log(self) -> None:
        """Keep the log at ``stop`` (an error names it: it is the user's to read now)."""
        self._temp_log = False

    async def _wait_healthy(self, url: str) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise BackendError(
                        f"{self.label} exited with code {code} before it was ready; its log ({self.log_path}) "
                        f"ends with:\n{self.log_tail()}"
                    )
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            return
                if time.monotonic() >= deadline:
                    raise BackendError(
                        f"{self.label} did not become healthy at {url} within {self.startup_timeout_s:g} s "
                        f"(raise startup_timeout_s for big models); its log ({self.log_path}) ends with:\n"
                        f"{self.log_tail()}"
                    )
                await asyncio.sleep(0.25)

    async def stop(self) -> None:
        """End the process group (SIGTERM, then SIGKILL after ``stop_timeout_s``); remove a temporary log.
        Idempotent."""
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
        if self._temp_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path, self._temp_log = None, False

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:]) or "(empty log)"


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)  # the child leads its own group (start_new_session)


def free_port(host: str) -> int:
    """A TCP port free on ``host`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
