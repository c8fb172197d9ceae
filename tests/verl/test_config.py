"""Building verl's config for a tether run, checked by verl itself (its Hydra defaults, ``validate_config`` and
its typed configs), and ``VERL.prepare``: the datasets verl's ``RLHFDataset`` reads, the agent the workers
load, the clear errors (no GPU, a credit rule verl cannot honour, an unknown key)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.algorithms.verl.algorithm import CPU_ONLY
from tether.algorithms.verl.config import LoRASettings, Plan, build_config, check
from tether.algorithms.verl.dataset import LOOP_NAME, task_from
from tether.algorithms.verl.runtime import load_agent
from tether.training.run.run_dir import RunDir
from tether.training.run.settings import Settings


def _plan(model: Path, **changes: Any) -> Plan:
    fields: dict[str, Any] = {
        "model_path": str(model),
        "train_files": "/data/train.parquet",
        "val_files": "/data/val.parquet",
        "agent_loop": LOOP_NAME,
        "agent_loop_config_path": "/data/loops.yaml",
        "group_size": 4,
        "batch_size": 2,
    }
    return Plan(**{**fields, **changes})


def test_tethers_settings_land_in_verls_config_and_pass_verls_checks(tiny_model: Path) -> None:
    config = build_config(_plan(tiny_model, steps=7, metrics_path="/runs/m.jsonl"), None, {"agent_path": "/a.pkl"})
    rollout = config.actor_rollout_ref.rollout
    assert rollout.n == 4 and rollout.name == "vllm" and rollout.calculate_log_probs
    assert rollout.agent.default_agent_loop == LOOP_NAME
    assert rollout.agent.agent_loop_config_path == "/data/loops.yaml"
    assert config.actor_rollout_ref.model.path == str(tiny_model)
    assert config.algorithm.adv_estimator == "grpo" and config.critic.enable is False
    assert config.trainer.use_v1 and config.trainer.v1.trainer_mode == "sync"
    assert config.trainer.total_training_steps == 7 and config.data.train_batch_size == 2
    assert (config.data.train_files, config.data.val_files) == ("/data/train.parquet", "/data/val.parquet")
    assert dict(rollout.engine_kwargs.vllm) == {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}
    assert list(config.trainer.logger) == ["console", "file"]
    assert config.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH == "/runs/m.jsonl"
    assert config.tether.agent_path == "/a.pkl"
    check(config)  # verl's validate_config and its typed configs

    from verl.utils.config import omega_conf_to_dataclass

    typed = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    assert typed.n == 4 and typed.agent.default_agent_loop == LOOP_NAME


def test_lora_is_trained_by_verl_and_served_merged(tiny_model: Path) -> None:
    config = build_config(_plan(tiny_model, lora=LoRASettings(rank=8, alpha=32)))
    model = config.actor_rollout_ref.model
    assert (model.lora_rank, model.lora_alpha, model.target_modules) == (8, 32, "all-linear")
    # merged: verl's vLLM server then loads no adapter (its lora_as_adapter is rank > 0 and not merge), so the
    # weights the HTTP API samples are the trained ones
    assert model.lora.merge is True
    check(config)

    class PeftLike:
        r = 16
        lora_alpha = 8
        target_modules = ("q_proj", "v_proj")

    assert LoRASettings.of(PeftLike()) == LoRASettings(16, 8.0, ["q_proj", "v_proj"])
    with pytest.raises(ValueError, match="positive rank"):
        LoRASettings.of(object())


def test_the_users_overrides_win_dotted_nested_or_hydra(tiny_model: Path) -> None:
    dotted = build_config(_plan(tiny_model), {"actor_rollout_ref.rollout.n": 16, "trainer.nnodes": 2})
    assert dotted.actor_rollout_ref.rollout.n == 16 and dotted.trainer.nnodes == 2
    nested = build_config(
        _plan(tiny_model),
        {
            "actor_rollout_ref": {
                "actor": {"optim": {"lr": 3e-6}},
                "rollout": {"engine_kwargs": {"vllm": {"seed": 1}}},
            }
        },
    )
    assert nested.actor_rollout_ref.actor.optim.lr == 3e-6
    assert nested.actor_rollout_ref.rollout.engine_kwargs.vllm.seed == 1  # a free-form mapping of verl's
    assert nested.actor_rollout_ref.rollout.engine_kwargs.vllm.tool_call_parser == "hermes"  # tether's kept
    hydra = build_config(_plan(tiny_model), ["actor_rollout_ref.rollout.temperature=0.7"])
    assert hydra.actor_rollout_ref.rollout.temperature == 0.7
    # what the bridge needs is not the user's to change
    forced = build_config(_plan(tiny_model), {"actor_rollout_ref.rollout.agent.default_agent_loop": "x"})
    assert forced.actor_rollout_ref.rollout.agent.default_agent_loop == LOOP_NAME


def test_bad_overrides_are_refused_with_the_reason(tiny_model: Path) -> None:
    with pytest.raises(ValueError, match=r"trainer\.n_gpu_per_node"):
        build_config(_plan(tiny_model), {"trainer.n_gpu_per_node": 8})
    with pytest.raises(ValueError, match="'sync' mode"):
        build_config(_plan(tiny_model), {"trainer.v1.trainer_mode": "colocate_async"})
    with pytest.raises(ValueError, match="vLLM rollout servers"):
        build_config(_plan(tiny_model), {"actor_rollout_ref.rollout.name": "sglang"})
    with pytest.raises(TypeError, match="mapping"):
        build_config(_plan(tiny_model), "trainer.nnodes=2")  # type: ignore[arg-type]
    # verl's own validation: sampled validation needs a temperature above 0
    sampled_greedy = {
        "actor_rollout_ref.rollout.val_kwargs.do_sample": True,
        "actor_rollout_ref.rollout.temperature": 0,
    }
    with pytest.raises(AssertionError, match="temperature should be greater than 0"):
        check(build_config(_plan(tiny_model), sampled_greedy))


def _agent(task: str) -> str:
    return task


def _reward(task: str, output: str) -> float:
    return 1.0


def test_prepare_writes_what_verl_reads(tiny_model: Path, tmp_path: Path) -> None:
    pytest.importorskip("openai")  # the plain-function adapter takes functions once openai is imported
    pytest.importorskip("tether_openai")
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    agent = tether.wrap(_agent, reward=_reward, optimize=["solver"])
    algo = tether.VERL(model=str(tiny_model), group_size=2, batch_size=4, lora=8)
    run = RunDir.create(tmp_path, "run")
    session = tether.Session(agent, algo.backend, run=run, settings=Settings(steps=3, eval_every=2, n_runners=6))
    train = [tether.Task(input={"q": f"{i}+1"}, task_id=f"t{i}", metadata={"n": i}) for i in range(3)]
    config = algo.prepare(session, train, [tether.Task(input="held out", task_id="v0")])

    assert config.data.train_batch_size == 3  # no more tasks per step than there are
    assert config.trainer.test_freq == 2 and config.trainer.val_before_train
    assert config.actor_rollout_ref.model.lora_rank == 8
    assert config.tether.settings.n_runners == 6 and config.tether.server_addresses == []
    assert (run.path / "verl" / "config.json").exists()

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    rows = RLHFDataset(config.data.train_files, tokenizer, config.data)
    assert len(rows) == 3
    assert [task_from(rows[i]) for i in range(3)] == train
    assert rows[1]["agent_name"] == LOOP_NAME and rows[1]["index"] == 1
    val = RLHFDataset(config.data.val_files, tokenizer, config.data)
    assert task_from(val[0]).input == "held out"

    again = load_agent(config.tether.agent_path)  # what each verl worker does
    assert again.agent is _agent and again.optimize == frozenset({"solver"}) and again.adapter.name == "openai"


def test_prepare_refuses_what_verl_cannot_do(tiny_model: Path, tmp_path: Path) -> None:
    pytest.importorskip("openai")  # the plain-function adapter takes functions once openai is imported
    pytest.importorskip("tether_openai")
    agent = tether.wrap(_agent, reward=_reward)
    run = RunDir.create(tmp_path, "run")
    per_call = tether.Session(agent, "http://127.0.0.1:9/v1", run=run, settings=Settings(credit="per_call"))
    with pytest.raises(ValueError, match="credit='episode'"):
        tether.VERL(model=str(tiny_model)).prepare(per_call, [tether.Task(input="x")], [])
    nameless = tether.Session(agent, "http://127.0.0.1:9/v1", run=run)
    with pytest.raises(ValueError, match=r"tether.VERL\(model="):
        tether.VERL().prepare(nameless, [tether.Task(input="x")], [])
    from_trainer = tether.Session(agent, f"vllm:{tiny_model}", run=run)
    config = tether.VERL().prepare(from_trainer, [tether.Task(input="x")], [])
    assert config.actor_rollout_ref.model.path == str(tiny_model)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the CPU-only error")
async def test_fit_on_a_machine_without_gpus_says_what_to_use_instead(tmp_path: Path) -> None:
    pytest.importorskip("openai")  # the plain-function adapter takes functions once openai is imported
    pytest.importorskip("tether_openai")
    session = tether.Session(tether.wrap(_agent), "http://127.0.0.1:9/v1", run=RunDir.create(tmp_path, "r"))
    with pytest.raises(RuntimeError) as raised:
        await tether.VERL(model="Qwen/Qwen2.5-0.5B-Instruct").fit(session, [tether.Task(input="x")], [])
    assert str(raised.value) == CPU_ONLY and "tether.GRPO" in CPU_ONLY and "hf:" in CPU_ONLY


def test_import_tether_and_its_verl_attribute_import_no_verl() -> None:
    code = (
        "import sys, tether; tether.VERL; tether.VERL(config={'trainer.nnodes': 1}).backend; "
        "print(sorted(m for m in ('verl', 'ray', 'omegaconf', 'hydra', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
