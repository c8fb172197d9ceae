"""``Trainer(report_to=...)``: a real ``fit`` sends the rows of ``metrics.jsonl`` to TensorBoard, Weights & Biases
and MLflow, all offline, and each sink's own files are read back: TensorBoard event files, the W&B offline run
file (``WANDB_MODE=offline``), MLflow's ``file://`` store through its client. APO (no torch) on the fake LLM for
the three sinks; GRPO with two policies and a per-target reward on the embedded model for the per-policy and
per-target curves. Bad names and missing packages fail when the Trainer is made, naming the fix."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest
from report_readers import Curves, mlflow_curves, tensorboard_curves, wandb_curves

import tether
from tether.algorithms import apo_prompts
from tether.capture.context import agent_scope
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, text
from tether.training.run.report import scalars
from tether.types import PromptTemplate

# -- the user's agent: one call under a system prompt that APO tunes --------------------------------------

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-user", max_retries=0)
START = "You answer questions about {topic}."
BETTER = "You answer questions about {topic}. Name the city."
TASKS = [{"question": f"Capital of country {i}?", "answer": f"City{i}"} for i in range(4)]


def answer(task: dict[str, Any], system: str) -> str:
    messages: list[Any] = [{"role": "system", "content": system}, {"role": "user", "content": task["question"]}]
    return client.chat.completions.create(model="m", messages=messages).choices[0].message.content or ""


def run_with_prompt(agent: Any, task: dict[str, Any], resources: tether.Resources) -> str:
    return str(agent(task, resources.prompts["system"].format(topic="geography")))


def agent_model(request: dict[str, Any]) -> Any:
    """Answers right only when the system prompt asks for the city; half right otherwise."""
    system, question = request["messages"][0]["content"], request["messages"][1]["content"]
    number = int(question.split()[3].rstrip("?"))
    right = "Name the city" in system or number % 2 == 0
    return text(f"City{number}" if right else "somewhere")


def optimizer_model(request: dict[str, Any]) -> Any:
    if request["messages"][0]["content"] == apo_prompts.CRITIC_SYSTEM:
        return text("Tell the agent to name the city.")
    return text(f"<prompt>{BETTER}</prompt>")


def _right(task: dict[str, Any], output: str) -> float:
    return float(output == task["answer"])


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """W&B offline and quiet; MLflow on a file store in tmp_path. Returns the MLflow tracking URI."""
    uri = (tmp_path / "mlruns").as_uri()
    for name, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_PROJECT": "tether-tests",
        "MLFLOW_TRACKING_URI": uri,
        "MLFLOW_EXPERIMENT_NAME": "tether-tests",
        "MLFLOW_ALLOW_FILE_STORE": "true",  # MLflow 3.x keeps its file store behind this opt-in
    }.items():
        monkeypatch.setenv(name, value)
    return uri


def _expected(run_dir: Path) -> Curves:
    """The numbers of metrics.jsonl as the sinks should hold them: ``<kind>/<metric>`` at the row's step."""
    curves: Curves = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for tag, value in scalars(row).items():
            curves.setdefault(tag, {})[int(row["step"])] = value
    return curves


def _same(got: Curves, want: Curves) -> None:
    assert set(got) == set(want), (sorted(got), sorted(want))
    for tag, points in want.items():
        assert set(got[tag]) == set(points), (tag, got[tag], points)
        for step, value in points.items():
            assert got[tag][step] == pytest.approx(value, rel=1e-6), (tag, step)  # TensorBoard keeps float32


async def test_an_apo_fit_reaches_tensorboard_wandb_and_mlflow(offline: str, tmp_path: Path) -> None:
    async with FakeLLM(handler=agent_model) as agent_llm, FakeLLM(handler=optimizer_model) as optimizer_llm:
        algorithm = tether.APO(
            optimizer_model=optimizer_llm.base_url,
            prompts={"system": PromptTemplate(START)},
            beam_width=1,
            branch_factor=1,
            rounds=2,
            train_batch_size=2,
            val_batch_size=4,
        )
        backend = RemoteBackend(agent_llm.base_url)
        try:
            trainer = tether.Trainer(
                model=backend,
                algorithm=algorithm,
                run_root=str(tmp_path / "runs"),
                name="apo-report",
                progress=False,
                report_to=["tensorboard", "wandb", "mlflow"],
            )
            wrapped = tether.wrap(answer, reward=_right, run=run_with_prompt)
            result = await trainer.afit(wrapped, train=TASKS, val=TASKS)
        finally:
            await backend.close()
    run_dir = Path(result.run_dir)
    want = _expected(run_dir)
    assert want["eval/greedy_accuracy"] == {0: 0.5, 1: 1.0, 2: 1.0}, want  # the run did improve the prompt

    _same(tensorboard_curves(run_dir / "tensorboard"), want)

    (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    info, curves = wandb_curves(run_file)
    assert info["name"] == "apo-report" and info["algorithm"] == "APO"
    _same(curves, want)

    info_ml, curves_ml = mlflow_curves(offline, "tether-tests")
    assert (info_ml["run_name"], info_ml["status"], info_ml["algorithm"]) == ("apo-report", "FINISHED", "APO")
    _same(curves_ml, want)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="GRPO on the embedded model needs torch")
def test_grpo_curves_per_policy_and_target_reach_tensorboard(tmp_path: Path) -> None:
    from tether.models.embedded import create_embedded

    tasks = [f"Pick a letter, round {i}." for i in range(4)]
    model_dir = create_embedded(tasks + list("abcdefgh"), preset="nano", seed=0).save(tmp_path / "nano")
    local = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)

    def two_agents(task: str) -> dict[str, str]:
        out = {}
        for name in ("writer", "checker"):
            with agent_scope(name):
                reply = local.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}])
            out[name] = reply.choices[0].message.content or ""
        return out

    def reward(task: str, output: dict[str, str]) -> dict[str, float]:
        return {name: float(output[name].strip() in ("a", "b")) for name in ("writer", "checker")}

    trainer = tether.Trainer(
        model=f"embedded:{model_dir}",
        algorithm=tether.GRPO(group_size=2, tasks_per_step=2),
        n_runners=4,
        steps=2,
        eval_every=2,
        sampling={"max_tokens": 2},
        run_root=str(tmp_path / "runs"),
        name="grpo-report",
        progress=False,
        report_to="tensorboard",
    )
    wrapped = tether.wrap(two_agents, reward=reward, optimize={"w": ["writer"], "c": ["checker"]})
    # the untrained nano model may score nothing, which the preflight rightly stops: this checks the curves
    result = trainer.fit(wrapped, train=tasks, val=tasks[:2], preflight=False)
    run_dir = Path(result.run_dir)
    want = _expected(run_dir)
    # a curve per target of the reward and per policy of the update, besides the run's own
    assert {"train/reward", "train/reward/writer", "train/reward/checker", "eval/greedy_accuracy/writer"} <= set(
        want
    ), sorted(want)
    assert any(tag.endswith("/w") for tag in want) and any(tag.endswith("/c") for tag in want), sorted(want)
    _same(tensorboard_curves(run_dir / "tensorboard"), want)


def test_a_row_becomes_kind_slash_metric_scalars() -> None:
    row = {"time": 1.0, "kind": "train", "step": 3, "reward": 0.5, "failed": 1, "best": "c-1", "beam": [1, 2]}
    assert scalars({**row, "loss/w": 0.25, "flag": True}) == {
        "train/reward": 0.5,
        "train/failed": 1.0,
        "train/loss/w": 0.25,
        "train/flag": 1.0,
    }


def test_bad_names_and_missing_packages_fail_when_the_trainer_is_made() -> None:
    with pytest.raises(ValueError, match="report_to='tensorbored' is not a sink: choose from tensorboard, wandb"):
        tether.Trainer(model="http://127.0.0.1:9/v1", report_to="tensorbored")
    with pytest.raises(ValueError, match="report_to takes a sink name or a list of them"):
        tether.Trainer(model="http://127.0.0.1:9/v1", report_to=3)  # type: ignore[arg-type]
    assert tether.Trainer(model="http://127.0.0.1:9/v1", report_to="none").report_to == "none"
    code = (
        "import sys\n"
        "sys.modules['wandb'] = None  # as if not installed\n"
        "import tether\n"
        "try:\n"
        "    tether.Trainer(model='http://127.0.0.1:9/v1', report_to=['tensorboard', 'wandb'])\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == 'report_to="wandb" needs wandb: pip install "tether[wandb]"'


def test_no_sink_package_is_imported_unless_a_run_asks() -> None:
    code = (
        "import sys, tether\n"
        "tether.Trainer(model='http://127.0.0.1:9/v1', report_to=['tensorboard', 'wandb', 'mlflow'])\n"
        "print([m for m in ('tensorboard', 'wandb', 'mlflow') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
