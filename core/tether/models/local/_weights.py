"""The weights a local torch backend serves and trains: held under one lock, updated in place, per policy.

``LocalWeights`` is the weight-management half of ``tether.models.local._backend.LocalBackend`` (the other half
serves requests): ``policy(name)`` holds the lock and yields a policy's model to update in place (bumping its
weights version), ``declare_policies(names)`` gives each named policy its own weights beside the frozen start
(``tether.models.local._policies``), ``attach_lora`` wraps the model in PEFT adapters, and ``save`` /
``load_weights`` write and read checkpoints (full weights, a PEFT adapter with its base's path, or one set per
policy). ``serving(policy)`` is the model that samples a policy, for the serving half.

``attach_lora(tether.LoRA(...))`` wraps the served model in PEFT adapters: from then on ``policy()`` yields the
PEFT model (only the adapters train), sampling uses base + adapter, and checkpoints hold the adapter (PEFT
format) with the path of its base, or the base itself beside it when the model was built in memory.

``declare_policies(names)`` gives each named policy its own weights (a full copy, or a LoRA adapter per policy
on one base) beside the frozen starting model, see ``tether.models.local._policies``: ``policy(name)`` yields
one policy's model, and checkpoints hold them all.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from tether.models._quiet import quiet
from tether.models.local._policies import (
    BASE_SUBDIR,
    PolicyWeights,
    check_names,
    load_policies,
    read_manifest,
    save_base,
)
from tether.policies import DEFAULT_POLICY, FROZEN_POLICY

if TYPE_CHECKING:
    from tether.models.lora import LoRA


class LocalWeights:
    """The served model's weights and their versions, guarded by ``weights_lock`` (see the module docstring).
    Subclasses set ``model`` and ``tokenizer``; ``name`` is the backend's."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    #: the adapters on the served model (``attach_lora``); None: the full weights train
    lora: LoRA | None = None
    #: the checkpoint directory the base weights were loaded from; None when built in memory
    base_dir: str | None = None

    def __init__(self) -> None:
        self.weights_lock = threading.RLock()
        #: the default policy's version: bumped at the end of every ``policy()`` block on it
        self.weights_version = 0
        #: the declared policies and their weights (``declare_policies``); None: one policy, ``self.model``
        self.policies: PolicyWeights | None = None

    @contextlib.contextmanager
    def policy(self, name: str | None = None) -> Iterator[PreTrainedModel]:
        """Hold the weights (no batch runs meanwhile) and yield policy ``name``'s model to update in place (the
        PEFT model with that policy's adapter active, whose only trainable parameters are that adapter, after
        ``attach_lora``). None (or ``"policy"``): the default policy, the first declared. ``"frozen"`` yields
        the frozen start to read; its version never changes."""
        with self.weights_lock:
            if self.policies is None:
                if name not in (None, DEFAULT_POLICY):
                    raise ValueError(f"this {self.name} backend holds one policy; {name!r} was never declared")
                try:
                    yield self.model
                finally:
                    self.weights_version += 1
                    self.model.eval()
                return
            policies = self.policies
            key = policies.resolve(name)
            with policies.weights(self.model, key) as model:
                try:
                    yield model
                finally:
                    model.eval()
                    if key != FROZEN_POLICY:
                        policies.versions[key] += 1
                        self.weights_version = policies.versions[policies.default]

    def weights_version_of(self, name: str | None = None) -> int:
        """The weights version of policy ``name`` (None: the default policy; the frozen start is always 0)."""
        if self.policies is None:
            return self.weights_version
        return self.policies.version(self.policies.resolve(name))

    def declare_policies(self, names: Sequence[str]) -> None:
        """Hold one set of weights per trained policy in ``names`` (the first is the default) beside the frozen
        starting model: full copies, or one LoRA adapter each once ``attach_lora`` is called (before or after).
        Idempotent for the same names; other names are refused."""
        wanted = check_names(names)
        with self.weights_lock:
            if self.policies is not None:
                if self.policies.names != wanted:
                    raise ValueError(
                        f"this {self.name} backend already holds the policies {self.policies.names}; it cannot "
                        f"also take {wanted}: open a fresh backend"
                    )
                return
            self.policies = PolicyWeights(wanted, start=self.weights_version)  # (versions only grow)
            if self.lora is not None:
                self.policies.add_adapters(self.model, self.lora)

    def attach_lora(self, lora: LoRA) -> None:
        """Wrap the served model in fresh LoRA adapters, one per declared policy (outputs unchanged until they
        train). Idempotent for the same setting; a different one is refused (the adapters already hold
        training)."""
        from tether.models.lora import attach

        with self.weights_lock:
            if self.lora is not None:
                if self.lora != lora:
                    raise ValueError(
                        f"this {self.name} backend already holds {self.lora}; it cannot also take {lora}: "
                        "open a fresh backend for a different LoRA setting"
                    )
                return
            if self.policies is not None:
                self.policies.drop_copies()
            self.model = attach(self.model, lora)
            self.model.eval()
            self.lora = lora
            if self.policies is not None:
                self.policies.add_adapters(self.model, lora)

    def save(self, directory: str) -> None:
        """Write a checkpoint directory (under the lock): the full weights and tokenizer as a transformers
        checkpoint or, with LoRA, the adapter in PEFT format and the tokenizer, recording the base's path (the
        base is written to ``<directory>/base`` when it has no directory of its own)."""
        if self.policies is not None:
            with self.weights_lock:
                self.policies.save(self.model, self.tokenizer, directory, base_dir=self.base_dir)
            return
        with self.weights_lock, quiet():
            if self.lora is None:
                self.model.save_pretrained(directory)
                self.tokenizer.save_pretrained(directory)
                return
            from tether.models.lora import save_adapter

            base = self.base_dir
            if base is None:
                save_base(self.model, str(Path(directory) / BASE_SUBDIR))
                self.tokenizer.save_pretrained(str(Path(directory) / BASE_SUBDIR))
                base = BASE_SUBDIR  # relative: resolved against the adapter directory
            save_adapter(self.model, directory, base=base)
            self.tokenizer.save_pretrained(directory)

    def load_weights(self, directory: str) -> None:
        """Replace the served weights in place with those of a checkpoint written by ``save`` (a run resuming):
        the adapter with LoRA, else the full weights."""
        from tether.models.lora import is_adapter_dir

        if self.policies is not None:
            load_policies(self, self.policies, directory)
            return
        if read_manifest(directory) is not None:
            raise ValueError(
                f"{directory} holds one set of weights per policy (policies.json), but this backend holds one "
                "policy: resume with the optimize= map the run was started with"
            )
        if self.lora is not None:
            if not is_adapter_dir(directory):
                raise ValueError(
                    f"{directory} holds full weights, not a LoRA adapter, but this backend trains {self.lora}: "
                    "resume it without lora=, or serve it as the base (model='hf:<dir>')"
                )
            from tether.models.lora import load_adapter_weights

            with self.policy() as model:
                load_adapter_weights(model, directory)
            return
        if is_adapter_dir(directory):
            raise ValueError(
                f"{directory} holds a LoRA adapter, not full weights: resume it with GRPO(lora=tether.LoRA(...)) "
                "(the same setting), or merge it into its base with `tether merge`"
            )
        with quiet():
            loaded = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True)
        with self.policy() as model:
            model.load_state_dict(loaded.state_dict())

    @contextlib.contextmanager
    def serving(self, policy: str) -> Iterator[PreTrainedModel]:
        """The model that samples ``policy`` (hold the weights lock around it)."""
        if self.policies is None:
            yield self.model
        else:
            with self.policies.weights(self.model, policy) as model:
                yield model
