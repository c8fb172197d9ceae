"""``tether.VERL``: train with verl (multi-GPU, multi-node FSDP/Megatron on Ray) through its V1 agent loop.

``VERL.fit(session, train, val)`` is an ``Algorithm``: it writes the tasks as verl datasets, pickles the
wrapped agent for verl's workers, builds verl's config (``config.build_config``: verl's defaults, tether's
settings, the user's ``config=``), checks it with verl's own validation, and runs verl's trainer
(``launch``), whose agent-loop workers run one tether rollout per sample (``agent_loop``). verl owns the
model: its FSDP/Megatron workers train it and its vLLM servers sample it, so ``VERL.uses_session`` is False: the
Trainer opens no store, backend, proxy or runner, and ``fit`` reads only the session's agent, settings, model
name and run folder (``Trainer(model="hf:<path>")`` loads nothing; ``VERL.backend`` is a placeholder backend
that is still accepted there).

Needs CUDA GPUs (verl's engines and its vLLM servers do not run on a CPU) and ``pip install "tether[verl]"``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.algorithms.base import Algorithm
from tether.algorithms.verl.config import LoRASettings, Plan, build_config, check
from tether.algorithms.verl.dataset import LOOP_NAME, write_parquet
from tether.algorithms.verl.runtime import RuntimeSpec, save_agent, settings_dict
from tether.models.base import BackendError, ChatRequest, ChatResult, ModelBackend
from tether.training.run.result import FitResult
from tether.types import Task

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from tether.training.engine.session import Session

LOOP_TARGET = "tether.algorithms.verl.agent_loop.TetherAgentLoop"
CPU_ONLY = (
    "tether.VERL trains through verl, whose FSDP/Megatron workers and vLLM servers need CUDA GPUs, and this "
    "machine has none. On a CPU (or one GPU) train with tether.GRPO on model='hf:<path>' or 'vllm:<path>'."
)


class VerlServed(ModelBackend):
    """The ``Trainer(model=...)`` of a ``VERL`` run: verl's vLLM servers serve the model, so this backend
    loads nothing, and answers only with an error saying so."""

    name = "verl"

    def __init__(self, path: str | None) -> None:
        self.path = path

    async def chat(self, request: ChatRequest) -> ChatResult:
        raise BackendError(
            f"the model {self.path!r} is served by verl's vLLM servers during tether.VERL.fit only; check an "
            "agent's wiring with Trainer.dev on another backend (a vllm:/hf: model or an OpenAI-compatible URL)"
        )


@dataclass
class VERL(Algorithm):
    """verl's PPO/GRPO trainer with tether's agent loop (needs CUDA GPUs and ``tether[verl]``).

    ``config``: overrides of verl's ``ppo_trainer`` config — a mapping of dotted keys
    (``{"trainer.n_gpus_per_node": 8, "actor_rollout_ref.actor.optim.lr": 1e-6}``) or nested dicts, checked
    against verl's keys, or a list of Hydra overrides (``["model_engine=megatron"]``); they win over tether's
    settings below. ``model``: the Hugging Face path or hub name verl trains (default: the path in the
    trainer's ``model="hf:<path>"`` / ``"vllm:<path>"``, which the trainer does not load: verl does;
    ``model=algo.backend`` works too). ``group_size``: samples per task, verl's ``rollout.n``. ``batch_size``:
    tasks per step.
    ``lora``: a rank, or ``tether.LoRA(...)``-like object (``r``, ``alpha``, ``target_modules``): verl trains
    the adapter and serves it merged. ``tool_call_parser``: vLLM's parser of tool calls (None: no tools).
    The trainer's ``steps``, ``eval_every``, ``seed`` and ``n_runners`` (concurrent rollouts per verl worker)
    carry over; its credit rule must be ``"episode"`` (verl's GRPO scores a rollout by its last row).
    """

    config: Mapping[str, Any] | Sequence[str] | None = None
    model: str | None = None
    group_size: int = 8
    batch_size: int = 8
    lora: Any = None
    prompt_length: int = 4096
    response_length: int = 1024
    tool_call_parser: str | None = "hermes"
    n_gpus_per_node: int | None = None
    nnodes: int = 1

    @property
    def uses_session(self) -> bool:
        """False: verl's workers run the rollouts, so the Trainer starts nothing of its own."""
        return False

    @property
    def backend(self) -> ModelBackend:
        """A backend for ``Trainer(model=...)`` that loads nothing (verl serves the model)."""
        return VerlServed(self.model)

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult:
        require_gpu()
        config = self.prepare(session, train, val)
        from tether.algorithms.verl.launch import launch, stop

        try:
            await asyncio.to_thread(launch, config)
        except asyncio.CancelledError:  # Ctrl-C in Trainer.fit: verl's Ray actors go with the cluster
            stop()
            raise
        run = session.require_run("tether.VERL")
        history = _verl_history(Path(config.tether.metrics_path))
        for record in history:
            run.log(record)
        output = Path(config.trainer.default_local_dir)
        return FitResult(run_dir=run.path, history=history, checkpoint=output if output.exists() else None)

    def prepare(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> DictConfig:
        """Everything before verl starts: the datasets, the pickled agent and verl's config, checked by verl.
        Returns the config (what ``fit`` runs; runs on a machine without GPUs too)."""
        require_verl()
        settings = session.settings
        if settings.credit != "episode" or settings.tool_error_penalty:
            raise ValueError(
                "tether.VERL scores a rollout as a whole (verl's GRPO reads a rollout's reward from its last "
                "row): use the trainer's credit='episode' and no tool_error_penalty"
            )
        if not train:
            raise ValueError("tether.VERL needs at least one training task")
        run = session.require_run("tether.VERL")
        folder = run.path / "verl"
        train_file = write_parquet(list(train), folder / "train.parquet", LOOP_NAME)
        val_file = write_parquet(list(val), folder / "val.parquet", LOOP_NAME) if val else train_file
        loops = folder / "agent_loops.yaml"
        loops.write_text(f"- name: {LOOP_NAME}\n  _target_: {LOOP_TARGET}\n")
        agent_path = save_agent(session.agent, folder / "agent.pkl")
        plan = Plan(
            model_path=self._model_path(session),
            train_files=str(train_file),
            val_files=str(val_file),
            agent_loop=LOOP_NAME,
            agent_loop_config_path=str(loops),
            group_size=self.group_size,
            batch_size=min(self.batch_size, len(train)),
            steps=settings.steps,
            eval_every=settings.eval_every,
            validate=bool(val),
            n_gpus_per_node=self.n_gpus_per_node or max(_gpu_count(), 1),
            nnodes=self.nnodes,
            prompt_length=self.prompt_length,
            response_length=self.response_length,
            lora=LoRASettings.of(self.lora),
            tool_call_parser=self.tool_call_parser,
            output_dir=str(folder / "checkpoints"),
            experiment=run.path.name,
            seed=settings.seed,
            metrics_path=str(folder / "metrics.jsonl"),
        )
        spec: RuntimeSpec = {
            "agent_path": str(agent_path),
            "settings": settings_dict(settings),
            "server_addresses": [],
            "model": None,
            "logprobs": True,
            "defaults": {},
        }
        config = build_config(plan, self.config, {**spec, "metrics_path": plan.metrics_path})
        top_k = config.actor_rollout_ref.rollout.top_k
        config.tether.logprobs = bool(config.actor_rollout_ref.rollout.calculate_log_probs)
        if top_k is not None and top_k > 0:
            config.tether.defaults = {"top_k": int(top_k)}
        check(config)
        (folder / "config.json").write_text(json.dumps(_container(config), indent=1, default=str))
        return config

    def _model_path(self, session: Session) -> str:
        """The folder of the model verl trains (a hub id found as transformers finds it: ``_hub.locate``)."""
        name = self._model_name(session)
        from tether.models._hub import is_hub_id, locate

        if Path(name).expanduser().is_dir() or (is_hub_id(name) and importlib.util.find_spec("huggingface_hub")):
            return str(locate(name, prefix="tether.VERL model="))
        return name

    def _model_name(self, session: Session) -> str:
        if self.model:
            return self.model
        model = session.model
        if isinstance(model, VerlServed) and model.path:
            return model.path
        if isinstance(model, str):
            for prefix in ("hf:", "vllm:"):
                if model.startswith(prefix) and model[len(prefix) :]:
                    return model[len(prefix) :]
        raise ValueError(
            "tether.VERL needs the model verl trains: tether.VERL(model='<hf path or hub name>') and "
            "Trainer(model=algo.backend, algorithm=algo)"
        )


def require_verl() -> None:
    """``ImportError`` naming the extra when verl is not installed."""
    if importlib.util.find_spec("verl") is None:
        raise ImportError('tether.VERL needs verl: pip install "tether[verl]" (verl 0.9.x, on CUDA GPUs)')


def require_gpu() -> None:
    """``RuntimeError`` saying what to use instead when there is no CUDA GPU."""
    if _gpu_count() == 0:
        raise RuntimeError(CPU_ONLY)


def _gpu_count() -> int:
    if importlib.util.find_spec("torch") is None:
        return 0
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _verl_history(path: Path) -> list[dict[str, Any]]:
    """verl's file-logger records (``{"step": n, "data": {...}}`` per line) as tether history records."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            out.append({"kind": "verl", "step": record.get("step"), **(record.get("data") or {})})
    return out


def _container(config: DictConfig) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(config, resolve=False)
