"""One set of weights per policy on a ``LocalBackend`` (the embedded and ``hf:`` backends).

``LocalBackend.declare_policies(names)`` (the Session calls it for ``optimize={policy: [sub-agents]}``) gives
each trained policy its own weights; the starting model serves ``FROZEN_POLICY`` and never changes:

- full weights: the starting model stays as the frozen policy and each trained policy gets a deep copy of it
  (made on first use, so a LoRA setting attached after the declaration replaces them before any exists);
- LoRA (``attach_lora``): one PEFT adapter per trained policy on the one base; the frozen policy is the base
  with the adapters disabled.

Checkpoint layout (``save``): the frozen start where a single-policy checkpoint puts its weights (full
weights: a transformers checkpoint in the directory itself; LoRA: the base is recorded, or written to
``base/`` when it has no directory of its own), each trained policy under ``policies/<name>/`` (a transformers
checkpoint, or a PEFT adapter whose config records the base, so ``hf:<dir>/policies/<name>`` serves it), and
``policies.json`` naming them. ``LocalBackend.load_weights`` reads every policy back (a run resuming).
This module imports no torch at import time (``check_names`` serves the vLLM backend too).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.models.base import BadRequest
from tether.policies import DEFAULT_POLICY, FROZEN_POLICY

if TYPE_CHECKING:
    from tether.models.lora import LoRA

#: where a LoRA checkpoint of a model built in memory keeps its base weights (inside the checkpoint directory)
BASE_SUBDIR = "base"
#: the file naming a per-policy checkpoint's policies (in the checkpoint directory)
MANIFEST = "policies.json"
#: where a per-policy checkpoint keeps each trained policy: ``<directory>/policies/<name>``
POLICIES_SUBDIR = "policies"


def check_names(names: Sequence[str]) -> list[str]:
    """The declared policy names as a list, or ValueError naming what is wrong."""
    out = list(names)
    if not out or any(not isinstance(n, str) or not n or "/" in n for n in out):
        raise ValueError(f"declare_policies takes policy names (non-empty strings without '/'), got {names!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"declare_policies got a policy name twice: {out}")
    if FROZEN_POLICY in out:
        raise ValueError(f"{FROZEN_POLICY!r} is the frozen starting model, not a trained policy")
    return out


class PolicyWeights:
    """The trained policies of one backend (in declared order; the first is the default) and their weights."""

    def __init__(self, names: Sequence[str], *, start: int = 0) -> None:
        self.names = check_names(names)
        #: each trained policy's version, bumped when its ``policy(name)`` block ends
        self.versions = dict.fromkeys(self.names, start)
        self._start = start
        #: full weights: each trained policy's copy of the starting model (made on first use)
        self.copies: dict[str, Any] = {}
        #: LoRA: each trained policy's adapter name in the PEFT model (PEFT calls its first one "default")
        self.adapters: dict[str, str] = {}

    @property
    def default(self) -> str:
        return self.names[0]

    def resolve(self, name: str | None) -> str:
        """The policy a request or ``policy(name)`` means: None and ``"policy"`` are the default; unknown names
        are a ``BadRequest`` naming the declared ones."""
        if name is None or (name == DEFAULT_POLICY and name not in self.versions):
            return self.default
        if name == FROZEN_POLICY or name in self.versions:
            return name
        raise BadRequest(f"unknown policy {name!r}: this backend holds {self.names} and {FROZEN_POLICY!r}")

    def version(self, name: str) -> int:
        """A policy's weights version (the frozen start is always 0)."""
        return 0 if name == FROZEN_POLICY else self.versions[name]

    # -- which weights ---------------------------------------------------------------------------------------

    def add_adapters(self, model: Any, lora: LoRA) -> None:
        """Give every trained policy an adapter on ``model`` (a PEFT model whose "default" adapter is fresh):
        the first policy takes "default", the others fresh ones of the same setting."""
        if self.adapters:
            return
        for i, name in enumerate(self.names):
            adapter = "default" if i == 0 else f"tether_{i}"
            if i:
                from tether.models.lora import seeded_init

                with seeded_init(i):
                    model.add_adapter(adapter, lora.peft_config(model))
            self.adapters[name] = adapter
        model.set_adapter("default")

    @contextlib.contextmanager
    def weights(self, base: Any, name: str) -> Iterator[Any]:
        """The model that computes policy ``name`` (resolved): the base for the frozen start (adapters off with
        LoRA), the policy's adapter made active, or its full copy."""
        if self.adapters:
            if name == FROZEN_POLICY:
                with base.disable_adapter():
                    yield base
                return
            base.set_adapter(self.adapters[name])
            yield base
            return
        if name == FROZEN_POLICY:
            yield base
            return
        if name not in self.copies:
            import torch

            with torch.inference_mode(False):  # (the sampler asks under inference mode: real parameters here)
                self.copies[name] = copy.deepcopy(base)
        yield self.copies[name]

    def drop_copies(self) -> None:
        """Forget the full copies before LoRA replaces them (refused once a policy has trained)."""
        if any(version != self._start for version in self.versions.values()):
            raise ValueError(
                "LoRA must be attached before any policy trains: these policies already hold full-weight updates"
            )
        self.copies.clear()

    # -- checkpoints -----------------------------------------------------------------------------------------

    def save(self, base: Any, tokenizer: Any, directory: str, *, base_dir: str | None) -> None:
        """Write every policy to ``directory`` (the layout in the module docstring)."""
        from tether.models._quiet import quiet

        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        with quiet():
            if self.adapters:
                from tether.models.lora import save_adapter

                if base_dir is None:
                    save_base(base, str(root / BASE_SUBDIR))
                    tokenizer.save_pretrained(str(root / BASE_SUBDIR))
                    recorded = str(Path("..") / ".." / BASE_SUBDIR)  # relative to policies/<name>
                else:
                    recorded = base_dir
                for name, adapter in self.adapters.items():
                    where = root / POLICIES_SUBDIR / name
                    save_adapter(base, where, base=recorded, adapter_name=adapter)
                    tokenizer.save_pretrained(str(where))
            else:
                base.save_pretrained(directory)
                for name in self.names:
                    with self.weights(base, name) as model:
                        model.save_pretrained(str(root / POLICIES_SUBDIR / name))
                    tokenizer.save_pretrained(str(root / POLICIES_SUBDIR / name))
            tokenizer.save_pretrained(directory)
        manifest = {"policies": self.names, "frozen": FROZEN_POLICY, "lora": bool(self.adapters)}
        (root / MANIFEST).write_text(json.dumps(manifest, indent=2))

    def check_checkpoint(self, directory: str) -> None:
        """ValueError naming the fix unless ``directory`` holds these policies, of this kind."""
        manifest = read_manifest(directory)
        if manifest is None:
            raise ValueError(
                f"{directory} holds one policy's weights, but this backend holds the policies {self.names}: "
                "resume with the optimize= map the run was started with"
            )
        saved, lora = list(manifest.get("policies") or []), bool(manifest.get("lora"))
        if saved != self.names:
            raise ValueError(
                f"{directory} holds the policies {saved}, not {self.names}: resume with the optimize= map the run "
                "was started with"
            )
        if lora != bool(self.adapters):
            held, wanted = ("LoRA adapters", "full weights") if lora else ("full weights", "LoRA adapters")
            raise ValueError(
                f"{directory} holds {held} per policy but this backend trains {wanted}: resume with the same "
                "GRPO(lora=...) setting"
            )


def load_policies(backend: Any, policies: PolicyWeights, directory: str) -> None:
    """Every policy's weights from a per-policy checkpoint (``save``) into ``backend`` (a ``LocalBackend``
    holding ``policies``), in place: the adapters with LoRA, else the full weights and the frozen start's."""
    policies.check_checkpoint(directory)
    if policies.adapters:
        from tether.models.lora import load_adapter_weights

        for name, adapter in policies.adapters.items():
            with backend.policy(name) as model:
                load_adapter_weights(model, policy_dir(directory, name), adapter_name=adapter)
        return
    from transformers import AutoModelForCausalLM

    from tether.models._quiet import quiet

    places = [(FROZEN_POLICY, directory)] + [(n, str(policy_dir(directory, n))) for n in policies.names]
    for name, where in places:
        with quiet():
            loaded = AutoModelForCausalLM.from_pretrained(where, local_files_only=True)
        with backend.policy(name) as model:
            model.load_state_dict(loaded.state_dict())


def read_manifest(directory: str) -> dict[str, Any] | None:
    """The ``policies.json`` of a per-policy checkpoint; None for a single-policy one."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def policy_dir(directory: str, name: str) -> Path:
    """Where a per-policy checkpoint keeps policy ``name``."""
    return Path(directory) / POLICIES_SUBDIR / name


def save_base(peft_model: Any, directory: str) -> None:
    """Write the frozen base weights under a PEFT model as a plain transformers checkpoint (the wrapped layers'
    ``base_layer`` weights under their original names, no adapter weights)."""
    inner = peft_model.get_base_model()
    state = {
        key.replace(".base_layer.", "."): value for key, value in inner.state_dict().items() if ".lora_" not in key
    }
    plain = type(inner)(inner.config).to(next(inner.parameters()).dtype)
    plain.load_state_dict(state, strict=True)
    plain.generation_config = inner.generation_config
    plain.save_pretrained(directory)
