"""verl's trainer config for a tether run: verl's own defaults, tether's settings, then the user's overrides.

The config starts from verl's ``ppo_trainer`` (composed by Hydra from the installed verl, as ``verl.trainer.
main_ppo`` composes it), takes tether's settings (group size → ``rollout.n``, the tether agent loop, the model,
LoRA, GPUs, steps), then the user's ``config=`` (a mapping of dotted keys — ``{"trainer.nnodes": 2}`` — or
nested dicts, checked against verl's keys; or a list of Hydra overrides such as ``"model_engine=megatron"``),
and last what the bridge cannot work without (the V1 trainer in ``sync`` mode, vLLM servers, tether's agent
loop and datasets). ``check`` runs verl's own validation (``validate_config``) and builds verl's typed configs
of the rollout, the model and the algorithm from it.

Two settings follow from how tether reaches verl's servers, over their OpenAI HTTP API:

- LoRA is trained by verl but merged into the served weights (``model.lora.merge``): verl's unmerged adapter
  lives in vLLM under a name only its token-level client uses, so HTTP calls would sample the base model.
- Tool calls need vLLM's tool parser (``engine_kwargs.vllm.enable_auto_tool_choice`` and
  ``tool_call_parser``, ``hermes`` by default: Qwen2.5 and most instruct models).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omegaconf import DictConfig

#: verl's V1 trainer mode the bridge runs (see ``VERL``: the weights version of a sample is exact only there)
TRAINER_MODE = "sync"


@dataclass(frozen=True, slots=True)
class LoRASettings:
    rank: int
    alpha: float = 16.0
    target_modules: str | list[str] = "all-linear"

    @classmethod
    def of(cls, lora: Any) -> LoRASettings | None:
        """From an int rank, or any object with ``r`` / ``rank``, ``alpha`` and ``target_modules``
        (``tether.LoRA``, a PEFT ``LoraConfig``)."""
        if lora is None:
            return None
        if isinstance(lora, int) and not isinstance(lora, bool):
            return cls(rank=lora)
        rank = getattr(lora, "r", None) or getattr(lora, "rank", None)
        if not isinstance(rank, int) or rank <= 0:
            raise ValueError(f"lora= needs a positive rank (an int, or an object with r=...), got {lora!r}")
        modules = getattr(lora, "target_modules", None) or "all-linear"
        alpha = getattr(lora, "alpha", None) or getattr(lora, "lora_alpha", None) or 16.0
        return cls(
            rank=rank, alpha=float(alpha), target_modules=modules if isinstance(modules, str) else list(modules)
        )


@dataclass(frozen=True, slots=True)
class Plan:
    """What tether decides for verl (everything else keeps verl's defaults or the user's overrides)."""

    model_path: str
    train_files: str
    val_files: str
    agent_loop: str
    agent_loop_config_path: str
    group_size: int = 8
    batch_size: int = 8
    steps: int = 20
    eval_every: int = 5
    validate: bool = False
    n_gpus_per_node: int = 1
    nnodes: int = 1
    prompt_length: int = 4096
    response_length: int = 1024
    lora: LoRASettings | None = None
    tool_call_parser: str | None = "hermes"
    output_dir: str = "checkpoints"
    project: str = "tether"
    experiment: str = "run"
    seed: int = 0
    metrics_path: str | None = None  # verl's file logger writes each step's metrics here (JSON lines)


def tether_settings(plan: Plan) -> dict[str, Any]:
    """tether's choices, as dotted keys of verl's config (the user's overrides come after)."""
    out: dict[str, Any] = {
        "algorithm.adv_estimator": "grpo",
        "actor_rollout_ref.model.path": plan.model_path,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.n": plan.group_size,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.actor.ppo_mini_batch_size": plan.batch_size,
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "data.train_batch_size": plan.batch_size,
        "data.max_prompt_length": plan.prompt_length,
        "data.max_response_length": plan.response_length,
        "data.filter_overlong_prompts": False,
        "data.seed": plan.seed,
        "trainer.n_gpus_per_node": plan.n_gpus_per_node,
        "trainer.nnodes": plan.nnodes,
        "trainer.total_training_steps": plan.steps,
        "trainer.total_epochs": max(plan.steps, 1),  # an upper bound: the steps end the run
        "trainer.logger": ["console", "file"] if plan.metrics_path else ["console"],
        "trainer.project_name": plan.project,
        "trainer.experiment_name": plan.experiment,
        "trainer.default_local_dir": plan.output_dir,
        "trainer.save_freq": max(plan.steps, 1),  # once, at the end
        "trainer.val_before_train": plan.validate,
        "trainer.test_freq": plan.eval_every if plan.validate else -1,
    }
    if plan.lora is not None:
        out.update(
            {
                "actor_rollout_ref.model.lora_rank": plan.lora.rank,
                "actor_rollout_ref.model.lora_alpha": plan.lora.alpha,
                "actor_rollout_ref.model.target_modules": plan.lora.target_modules,
                "actor_rollout_ref.model.lora.merge": True,
            }
        )
    if plan.tool_call_parser:
        out["actor_rollout_ref.rollout.engine_kwargs.vllm.enable_auto_tool_choice"] = True
        out["actor_rollout_ref.rollout.engine_kwargs.vllm.tool_call_parser"] = plan.tool_call_parser
    return out


def required_settings(plan: Plan) -> dict[str, Any]:
    """What the bridge needs whatever the user's overrides say."""
    return {
        "trainer.use_v1": True,
        "data.train_files": plan.train_files,
        "data.val_files": plan.val_files,
        "actor_rollout_ref.rollout.agent.default_agent_loop": plan.agent_loop,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": plan.agent_loop_config_path,
    }


def build_config(
    plan: Plan,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    tether: Mapping[str, Any] | None = None,
) -> DictConfig:
    """verl's config for ``plan`` with the user's ``overrides``; ``tether`` becomes its ``tether`` section
    (what the agent-loop workers read: ``tether.algorithms.verl.runtime.RuntimeSpec``)."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf, open_dict

    hydra_overrides: list[str] = []
    mapping: Mapping[str, Any] = {}
    if isinstance(overrides, Mapping):
        mapping = overrides
    elif overrides is not None:
        if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
            raise TypeError(
                'config= takes a mapping ({"trainer.nnodes": 2} or nested dicts) or a list of Hydra override '
                f'strings (["trainer.nnodes=2"]), got {overrides!r}'
            )
        hydra_overrides = list(overrides)
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=hydra_overrides)
    free = _free_form(config)
    _apply(config, tether_settings(plan), "tether's setting", free)
    _apply(config, _dotted(mapping), "config=", free)
    if _select(config, "trainer.v1.trainer_mode") != TRAINER_MODE:
        raise ValueError(
            f"tether.VERL runs verl's V1 trainer in {TRAINER_MODE!r} mode (trainer.v1.trainer_mode): the "
            "asynchronous modes need the weights version of each sampled token, which verl's OpenAI HTTP "
            "servers do not report"
        )
    if _select(config, "actor_rollout_ref.rollout.name") != "vllm":
        raise ValueError(
            "tether.VERL needs vLLM rollout servers (actor_rollout_ref.rollout.name=vllm): tether's proxy asks "
            "them for token ids with vLLM's return_token_ids"
        )
    _apply(config, required_settings(plan), "tether's setting", free)
    if _select(config, "critic.enable") is None and _select(config, "algorithm.adv_estimator") == "grpo":
        config.critic.enable = False  # what verl decides for GRPO anyway, said here so it need not warn
    with open_dict(config):
        config.tether = OmegaConf.create(dict(tether or {}))
    if plan.metrics_path:  # read by verl's file logger in its task runner, a Ray actor
        runtime_env = config.ray_kwargs.ray_init.runtime_env
        with open_dict(runtime_env):
            env = dict(runtime_env.get("env_vars") or {})
            runtime_env.env_vars = {**env, "VERL_FILE_LOGGER_PATH": plan.metrics_path}
    return config


def check(config: DictConfig) -> None:
    """verl's own checks of ``config``: ``validate_config`` (batch sizes against GPUs, LoRA rank, ...) and its
    typed configs of the rollout, the model and the algorithm. ``verl.trainer.main_ppo`` runs the same."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(config.algorithm)
    omega_conf_to_dataclass(config.actor_rollout_ref.model)


def _dotted(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts flattened to dotted keys; dotted keys kept as they are."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_dotted(value, name + "."))
        else:
            out[name] = value
    return out


def _free_form(config: DictConfig, prefix: str = "") -> set[str]:
    """The mappings verl's defaults leave empty (``engine_kwargs.vllm``, ``override_config``): free-form,
    any key may go in them."""
    from omegaconf import DictConfig

    out: set[str] = set()
    for key in config.keys():
        node = config._get_node(key)
        if isinstance(node, DictConfig) and not node._is_missing() and not node._is_none():
            name = f"{prefix}{key!s}"
            out.update(_free_form(node, name + ".") if len(node) else {name})
    return out


def _apply(config: DictConfig, settings: Mapping[str, Any], source: str, free: set[str]) -> None:
    """Set dotted keys: one under a ``free`` mapping may be new, any other unknown key is an error naming it."""
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    for key, value in settings.items():
        prefix = next((p for p in free if key.startswith(p + ".")), None)
        try:
            if prefix is not None:
                with open_dict(OmegaConf.select(config, prefix)):
                    OmegaConf.update(config, key, value, merge=False)
            else:
                OmegaConf.update(config, key, value, merge=False)
        except (ConfigKeyError, ConfigAttributeError) as exc:
            raise ValueError(f"{source} {key}={value!r}: verl's config has no such key ({exc})") from None


def _select(config: DictConfig, key: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.select(config, key)
