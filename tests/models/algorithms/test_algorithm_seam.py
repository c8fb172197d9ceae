"""The training seam: an algorithm written here, in the test file, trains through ``Trainer.fit`` with no
change to tether; and Ctrl-C in ``fit`` returns the real run folder without printing."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.models.embedded import EmbeddedBackend  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
LETTERS = "abcdefgh"
GOOD = ("a", "b")


def pick_letter(task: str) -> str:
    reply = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


def reward(task: str, output: str) -> float:
    return float(output.strip() in GOOD)


# -- a third algorithm, defined here: REINFORCE without a baseline ------------------------------------------


@dataclass
class Reinforce:
    """Each step: ``repeats`` sampled rollouts of every training task, then one gradient step on
    ``-reward * log p(response)`` over the transitions. No baseline, no clipping, no KL."""

    repeats: int = 8
    lr: float = 0.05
    batches: list[tether.Batch] = field(default_factory=list)

    async def fit(
        self, session: tether.Session, train: Sequence[tether.Task], val: Sequence[tether.Task]
    ) -> tether.FitResult:
        backend = session.backend
        assert isinstance(backend, tether.TrainableBackend) and session.run is not None
        optimizer: torch.optim.Optimizer | None = None
        history = []
        for step in range(1, session.settings.steps + 1):
            batch = await session.run_batch(train, self.repeats, {"temperature": 1.0}, tether.Mode.TRAIN)
            self.batches.append(batch)
            with backend.policy() as model:
                optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=self.lr)
                model.train()
                loss = torch.zeros(())
                for t in batch.transitions:
                    ids = torch.tensor([t.prompt_token_ids + t.response_token_ids])
                    logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
                    taken = logp[len(t.prompt_token_ids) - 1 :].gather(-1, ids[0, len(t.prompt_token_ids) :, None])
                    loss = loss - t.reward * taken.sum()
                optimizer.zero_grad()
                (loss / max(len(batch.transitions), 1)).backward()
                optimizer.step()
            record = {"kind": "train", "step": step, "reward": batch.mean_reward}
            session.run.log(record)
            history.append(record)
        return tether.FitResult(run_dir=session.run.path, history=history)


# -- the test -----------------------------------------------------------------------------------------------


def _tasks(n: int) -> list[str]:
    return [f"Pick a letter, round {i}." for i in range(n)]


def _p_good(backend: EmbeddedBackend, tasks: Sequence[str]) -> float:
    """The policy's mean probability of answering with a good letter's first token."""
    good = [backend.tokenizer.encode(letter, add_special_tokens=False)[0] for letter in GOOD]
    total = 0.0
    with backend.policy() as model, torch.no_grad():
        for task in tasks:
            prompt = backend.render([{"role": "user", "content": task}], None)
            logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
            total += float(torch.softmax(logits.float(), -1)[good].sum())
    return total / len(tasks)


def _train_letters(
    algorithm: Any, warm_start: Path, tmp_path: Path, name: str
) -> tuple[tether.FitResult, float, float]:
    """``algorithm`` through ``Trainer.fit`` on the letter task for 6 steps: the result, and the policy's mean
    probability of a good first token before and after."""
    backend = EmbeddedBackend(str(warm_start))
    train = _tasks(4)
    before = _p_good(backend, train)
    trainer = tether.Trainer(
        model=backend,
        algorithm=algorithm,
        steps=6,
        n_runners=8,
        name=name,
        run_root=str(tmp_path),
        progress=False,
        sampling={"max_tokens": 4},
    )
    try:
        result = trainer.fit(tether.wrap(pick_letter, reward=reward), train=train)
        after = _p_good(backend, train)
    finally:
        asyncio.run(backend.close())
    return result, before, after


def test_an_algorithm_defined_in_a_test_trains_through_trainer_fit(warm_start: Path, tmp_path: Path) -> None:
    algorithm = Reinforce()
    result, before, after = _train_letters(algorithm, warm_start, tmp_path, "toy")
    train = _tasks(4)

    # the batches it was given: every task `repeats` times, one trainable call per rollout, rewards attached
    assert len(algorithm.batches) == 6
    for batch in algorithm.batches:
        assert len(batch.rollouts) == 32 and batch.failed == 0
        assert sorted(r.input for r in batch.rollouts) == sorted(train * 8)
        assert len(batch.transitions) == 32 and all(
            t.trainable and t.response_token_ids for t in batch.transitions
        )
        assert [t.reward for t in batch.transitions] == [r.reward for r in batch.rollouts]
        assert batch.agent_names == {"pick_letter"}
    # and it learned: the rewarded replies became more likely (0.23 -> 0.75 to 0.80 in three runs)
    assert after > before + 0.3, (before, after, [h["reward"] for h in result.history])
    assert result.run_dir == tmp_path / "toy"
    assert len((tmp_path / "toy" / "metrics.jsonl").read_text().splitlines()) == 6


# -- Ctrl-C -------------------------------------------------------------------------------------------------


@dataclass
class PressesCtrlC:
    """Logs one record in its run folder, then the user presses Ctrl-C."""

    run_dir: Path | None = None

    async def fit(
        self, session: tether.Session, train: Sequence[tether.Task], val: Sequence[tether.Task]
    ) -> tether.FitResult:
        run = session.require_run("PressesCtrlC")
        self.run_dir = run.path
        run.log({"kind": "train", "step": 1, "reward": 0.5})
        main = threading.main_thread().ident
        assert main is not None
        # what Ctrl-C does: SIGINT to the main thread, waiting in fit. Pressed again while the run goes on, as a
        # user would: Python drops a KeyboardInterrupt raised inside a finalizer, and on a loaded machine the
        # main thread can still be collecting garbage (running __del__) when the first one lands
        await asyncio.sleep(0.2)
        for _ in range(10):
            signal.pthread_kill(main, signal.SIGINT)
            await asyncio.sleep(3)  # cancelled here once the interrupt stops the run
        raise AssertionError("the interrupt did not stop the run")


def test_ctrl_c_returns_the_real_run_folder_and_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    algorithm = PressesCtrlC()
    trainer = tether.Trainer(model="http://127.0.0.1:9/v1", algorithm=algorithm, run_root=str(tmp_path))
    # a terminal's Ctrl-C raises KeyboardInterrupt; a shell's background job (CI under nohup/&) ignores SIGINT
    # and Python then keeps ignoring it, so put the terminal's handler in place for this test
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # (no preflight: the model URL is dead, and this algorithm runs no rollout)
        result = trainer.fit(tether.wrap(pick_letter, reward=reward), train=["x"], preflight=False)
    finally:
        signal.signal(signal.SIGINT, previous)

    assert result.interrupted
    assert algorithm.run_dir is not None and result.run_dir == algorithm.run_dir
    assert result.run_dir.parent == tmp_path and result.run_dir.name.startswith("run-")
    assert [h["reward"] for h in result.history] == [0.5]
    assert result.checkpoint is None
    assert "interrupted before the first checkpoint" in result.summary()
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_an_object_without_fit_is_refused_naming_the_fix(tmp_path: Path) -> None:
    class NotAnAlgorithm:
        def train(self) -> None: ...

    class SyncFit:
        def fit(self, session: Any, train: Any, val: Any) -> None: ...

    agent = tether.wrap(pick_letter, reward=reward)
    for bad in (NotAnAlgorithm(), SyncFit()):
        trainer = tether.Trainer(model="http://127.0.0.1:9/v1", algorithm=bad, run_root=str(tmp_path))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"async def fit\(self, session, train, val\)"):
            trainer.fit(agent, train=["x"])
    assert not list(tmp_path.iterdir())  # refused before a run folder was made


def test_the_torch_backends_declare_that_they_can_be_trained() -> None:
    from tether.models.base import LoRACapable, PolicyBackend, PolicyVersions, RefitsTokenizer, RendersReplies
    from tether.models.remote import RemoteBackend

    embedded = EmbeddedBackend(preset="nano")
    assert isinstance(embedded, tether.TrainableBackend) and embedded.pad_token_id >= 0
    assert not isinstance(RemoteBackend("http://127.0.0.1:9/v1"), tether.TrainableBackend)
    # every capability tier a training algorithm asks for, tested by isinstance
    for capability in (LoRACapable, PolicyBackend, PolicyVersions, RendersReplies, RefitsTokenizer):
        assert isinstance(embedded, capability), capability


@dataclass
class ReinforceSubclass(tether.Algorithm):
    """The same REINFORCE, as a subclass of ``tether.Algorithm`` that writes only ``fit``: the contract's
    defaults (training tasks needed, the session opened, preflight without a flat-reward check) carry it."""

    inner: Reinforce = field(default_factory=Reinforce)

    async def fit(
        self, session: tether.Session, train: Sequence[tether.Task], val: Sequence[tether.Task]
    ) -> tether.FitResult:
        return await self.inner.fit(session, train, val)


def test_a_subclass_of_the_base_with_only_fit_trains_through_trainer_fit(warm_start: Path, tmp_path: Path) -> None:
    algorithm = ReinforceSubclass()
    result, before, after = _train_letters(algorithm, warm_start, tmp_path, "sub")
    assert len(algorithm.inner.batches) == 6
    assert after > before + 0.3, (before, after, [h["reward"] for h in result.history])
    assert algorithm.preflight_group is None and algorithm.uses_session
