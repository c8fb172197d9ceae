"""The algorithm contract is a base class the Trainer calls directly: a subclass that writes only ``fit`` trains
with the defaults, the optional parts it overrides are called in their order, an algorithm that needs no
session gets one that started nothing, and an object that is no subclass but defines a part of the contract is
refused naming it. Backends' optional powers are capability Protocols: a backend without one is refused in
words that name it.

The agent is a plain OpenAI-client agent against the scripted fake LLM, through the real proxy, runner and the
run folder's store.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.algorithms.grpo.policies import update_policies  # noqa: E402
from tether.models.base import (  # noqa: E402
    LoRACapable,
    PolicyBackend,
    PolicyVersions,
    RefitsTokenizer,
    RendersReplies,
)
from tether.models.remote import RemoteBackend  # noqa: E402
from tether.testing.fake_llm import FakeLLM, text  # noqa: E402
from tether.types import Transition  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
TASKS = [f"is {n} even?" for n in range(4)]


def answer(task: str) -> str:
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


def right(task: str, output: str) -> float:
    return float(output == "yes")


def _model(request: dict[str, Any]) -> Any:
    n = int(request["messages"][-1]["content"].split()[1])
    return text("yes" if n % 2 == 0 else "maybe")


class OnlyFit(tether.Algorithm):
    """The least a subclass writes: ``fit``. One batch, nothing trained, one record."""

    def __init__(self) -> None:
        self.batches: list[tether.Batch] = []

    async def fit(
        self, session: tether.Session, train: Sequence[tether.Task], val: Sequence[tether.Task]
    ) -> tether.FitResult:
        run = session.require_run("OnlyFit")
        batch = await session.run_batch(train, 2)
        self.batches.append(batch)
        run.log({"kind": "train", "step": 1, "reward": batch.mean_reward})
        return tether.FitResult(run_dir=run.path, history=run.history())


class Recording(OnlyFit):
    """Overrides every optional part the Trainer calls, and records the order it was called in."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def check_agent(self, agent: Any) -> None:
        self.calls.append("check_agent")

    def prepare_backend(self, backend: Any) -> None:
        self.calls.append(f"prepare_backend:{type(backend).__name__}")

    def check_session(self, session: tether.Session) -> None:
        self.calls.append(f"check_session:{type(session.backend).__name__}")

    async def fit(
        self, session: tether.Session, train: Sequence[tether.Task], val: Sequence[tether.Task]
    ) -> tether.FitResult:
        self.calls.append("fit")
        return await super().fit(session, train, val)


async def _fit(tmp_path: Path, algorithm: Any, **fit: Any) -> tether.FitResult:
    async with FakeLLM(handler=_model) as llm:
        backend = RemoteBackend(llm.base_url)
        try:
            trainer = tether.Trainer(
                model=backend, algorithm=algorithm, run_root=str(tmp_path), name="r", progress=False
            )
            return await trainer.afit(tether.wrap(answer, reward=right), train=TASKS, **fit)
        finally:
            await backend.close()


async def test_a_subclass_that_writes_only_fit_trains_with_the_defaults(tmp_path: Path) -> None:
    algorithm = OnlyFit()
    result = await _fit(tmp_path, algorithm)
    (batch,) = algorithm.batches
    assert len(batch.results) == 8 and batch.failed == 0
    assert {r.rollout.reward for r in batch.results} == {0.0, 1.0}
    assert [h["kind"] for h in result.history] == ["train"]
    # the defaults: training tasks needed, the session opened, advantages scaled by their group's spread
    assert algorithm.uses_train_tasks and algorithm.uses_session and algorithm.scale_by_std
    assert algorithm.preflight_group is None
    assert (tmp_path / "r" / "store.db").exists()


async def test_the_trainer_calls_each_part_of_the_contract_in_order(tmp_path: Path) -> None:
    algorithm = Recording()
    await _fit(tmp_path, algorithm)
    assert algorithm.calls == [
        "check_agent",
        "prepare_backend:RemoteBackend",
        "check_session:RemoteBackend",
        "fit",
    ]


async def test_check_agent_refuses_before_the_run_folder_exists(tmp_path: Path) -> None:
    class Refuses(OnlyFit):
        def check_agent(self, agent: Any) -> None:
            raise ValueError("not this agent")

    with pytest.raises(ValueError, match="not this agent"):
        await _fit(tmp_path, Refuses())
    assert not (tmp_path / "r").exists()


class NoSession(tether.Algorithm):
    """An algorithm that runs its rollouts elsewhere (as verl does): the session it gets started nothing."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    @property
    def uses_session(self) -> bool:
        return False

    def prepare_backend(self, backend: Any) -> None:
        raise AssertionError("no backend is opened for an algorithm that uses no session")

    async def fit(
        self, session: tether.Session, train: Sequence[tether.Task], val: Sequence[tether.Task]
    ) -> tether.FitResult:
        self.seen = {"model": session.model, "steps": session.settings.steps, "tasks": len(train)}
        with pytest.raises(RuntimeError, match="the session is not open"):
            session.store  # noqa: B018 - opened by nobody
        with pytest.raises(RuntimeError, match="the session is not open"):
            session.backend  # noqa: B018
        run = session.require_run("NoSession")
        return tether.FitResult(run_dir=run.path)


def test_an_algorithm_that_uses_no_session_starts_no_store_backend_or_proxy(tmp_path: Path) -> None:
    algorithm = NoSession()
    # a model that could not be opened, and no preflight=False: nothing is opened, no rollout runs
    trainer = tether.Trainer(
        model="hf:/no/such/model", algorithm=algorithm, run_root=str(tmp_path), name="v", steps=3
    )
    result = trainer.fit(tether.wrap(answer, reward=right), train=TASKS)
    assert algorithm.seen == {"model": "hf:/no/such/model", "steps": 3, "tasks": 4}
    assert result.run_dir == tmp_path / "v"
    assert not (tmp_path / "v" / "store.db").exists()


def test_verl_starts_nothing_of_the_trainers_own(tmp_path: Path) -> None:
    """On a machine without a GPU, VERL's first word is that it needs one: the trainer opened no backend (the
    model path does not exist), no store and no proxy before it."""
    from tether.algorithms.verl import VERL

    algorithm = VERL(model="/no/such/model")
    assert not algorithm.uses_session
    trainer = tether.Trainer(model="hf:/no/such/model", algorithm=algorithm, run_root=str(tmp_path), name="v")
    try:
        import torch

        gpus = torch.cuda.device_count()
    except ImportError:
        gpus = 0
    if gpus:
        pytest.skip("a GPU machine would start verl")
    with pytest.raises(RuntimeError, match="need CUDA GPUs"):
        trainer.fit(tether.wrap(answer, reward=right), train=TASKS)
    assert not (tmp_path / "v" / "store.db").exists()


def test_an_object_that_is_no_subclass_but_defines_a_contract_part_is_refused_naming_it(tmp_path: Path) -> None:
    class HalfAlgorithm:
        async def fit(self, session: Any, train: Any, val: Any) -> tether.FitResult:
            raise AssertionError("never reached")

        def prepare_backend(self, backend: Any) -> None: ...

    trainer = tether.Trainer(model="http://127.0.0.1:9/v1", algorithm=HalfAlgorithm(), run_root=str(tmp_path))
    with pytest.raises(TypeError, match=r"defines prepare_backend.*class HalfAlgorithm\(tether\.Algorithm\)"):
        trainer.fit(tether.wrap(answer, reward=right), train=TASKS)
    assert not list(tmp_path.iterdir())  # refused before a run folder was made


async def test_an_object_with_only_an_async_fit_still_trains(tmp_path: Path) -> None:
    class Plain:  # no subclass: the defaults are the contract's
        reached = False

        async def fit(self, session: Any, train: Any, val: Any) -> tether.FitResult:
            Plain.reached = True
            await session.run_batch(train[:2], 2)
            return tether.FitResult(run_dir=session.require_run("Plain").path)

    await _fit(tmp_path, Plain())
    assert Plain.reached


# -- backend capabilities ------------------------------------------------------------------------------------


def test_a_remote_backend_has_no_capability_beyond_chat() -> None:
    backend = RemoteBackend("http://127.0.0.1:9/v1")
    for capability in (tether.TrainableBackend, LoRACapable, PolicyBackend, PolicyVersions, RendersReplies):
        assert not isinstance(backend, capability), capability
    assert not isinstance(backend, RefitsTokenizer)


class Unversioned:
    """Holds weights it can update, but keeps no version per policy."""

    weights_version = 0
    pad_token_id = 0

    @contextmanager
    def policy(self, name: str | None = None) -> Iterator[Any]:
        raise AssertionError("refused before any weights are held")
        yield None

    def attach_lora(self, lora: Any) -> None: ...

    def save(self, directory: str) -> None: ...

    def load_weights(self, directory: str) -> None: ...


def _never_updates(model: Any, transitions: Any, **options: Any) -> dict[str, float]:
    raise AssertionError("refused before any update runs")


def test_a_per_policy_update_on_a_backend_without_policy_versions_is_refused_naming_the_capability() -> None:
    backend = Unversioned()
    assert isinstance(backend, tether.TrainableBackend) and not isinstance(backend, PolicyVersions)
    row = Transition(
        rollout_id="r",
        attempt_id="a",
        task_id="t",
        agent_name="writer",
        step=0,
        messages=[],
        response={},
        prompt_token_ids=[1],
        response_token_ids=[2],
        logprobs=None,
        reward=1.0,
        trainable=True,
        advantage=1.0,
        policy="writer",
    )
    with pytest.raises(ValueError, match=r"Unversioned is no tether\.models\.base\.PolicyVersions"):
        update_policies(_never_updates, backend, [row], ["writer"], 0)


async def test_a_lora_algorithm_on_a_backend_without_adapters_is_refused_naming_the_capability(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"RemoteBackend cannot \(it is no tether\.models\.base\.LoRACapable\)"):
        await _fit(tmp_path, tether.GRPO(lora=tether.LoRA()))
