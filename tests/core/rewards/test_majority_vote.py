"""``tether.MajorityVote`` as ``reward=``: each rollout is rewarded by the share of its group that gave the same
answer, with a plain OpenAI-client agent on the scripted fake LLM through the real proxy, runner and store; a
batch in which every answer differs says so in its metrics and notes; with ``contrast=True`` an answer
given to other tasks as often earns nothing, and the history of other tasks' answers is bounded."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether import spans  # noqa: E402
from tether.models.remote import RemoteBackend  # noqa: E402
from tether.testing.fake_llm import FakeLLM, text  # noqa: E402
from tether.types import SpanKind  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)


def answer(task: str) -> str:
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


def _script(*answers: str) -> Any:
    turns = itertools.count()
    return lambda request: text(answers[next(turns) % len(answers)])


def last_word(output: str) -> str | None:
    words = output.split()
    return words[-1] if words else None


async def _dev(reward: Any, llm: FakeLLM, tasks: list[str], repeats: int) -> Any:
    backend = RemoteBackend(llm.base_url)
    try:
        trainer = tether.Trainer(model=backend, progress=False, n_runners=2)  # a group larger than the runners
        return await trainer.adev(tether.wrap(answer, reward=reward), tasks, repeats=repeats)
    finally:
        await backend.close()


async def test_each_rollout_is_rewarded_by_the_share_of_its_group_giving_its_answer() -> None:
    async with FakeLLM(handler=_script("it is 4", "so 4", "it is 5", "answer: 4")) as llm:
        report = await _dev(tether.MajorityVote(extract=last_word), llm, ["2+2?"], repeats=4)
    assert sorted((last_word(r.output), r.reward) for r in report) == [
        ("4", 0.75),
        ("4", 0.75),
        ("4", 0.75),
        ("5", 0.25),
    ]
    for rollout in report:
        (span,) = [s for s in rollout.spans if s.kind == SpanKind.REWARD and s.name == "majority_vote"]
        agree = "3 of 4" if rollout.reward == 0.75 else "1 of 4"
        assert span.attributes[spans.REWARD_REASON].endswith(f": {agree} agree")
    assert not report.notes


async def test_no_answer_scores_zero_and_the_default_answer_is_the_trimmed_text() -> None:
    async with FakeLLM(handler=_script("Four", " four ", "")) as llm:
        report = await _dev(tether.MajorityVote(), llm, ["2+2?"], repeats=3)
    assert sorted(r.reward for r in report) == [0.0, pytest.approx(2 / 3), pytest.approx(2 / 3)]


async def test_every_answer_differing_in_every_group_is_said_in_the_notes_and_metrics(tmp_path: Path) -> None:
    class Batches:
        def __init__(self) -> None:
            self.batches: list[tether.Batch] = []

        async def fit(self, session: Any, train: Any, val: Any) -> tether.FitResult:
            self.batches.append(await session.run_batch(train, 3))
            return tether.FitResult(run_dir=session.require_run("Batches").path)

    algorithm = Batches()
    async with FakeLLM(handler=_script("a", "b", "c", "d", "e", "f", "g")) as llm:
        backend = RemoteBackend(llm.base_url)
        try:
            trainer = tether.Trainer(model=backend, algorithm=algorithm, run_root=str(tmp_path), progress=False)
            await trainer.afit(tether.wrap(answer, reward=tether.MajorityVote()), ["x?", "y?"], preflight=False)
        finally:
            await backend.close()
    (batch,) = algorithm.batches
    assert batch.group_metrics["majority/groups"] == 2.0 and batch.group_metrics["majority/all_different"] == 2.0
    assert batch.group_metrics["majority/agreement"] == pytest.approx(1 / 3)
    (note,) = [n for n in batch.credit.notes if n.startswith("MajorityVote")]
    assert "every answer differed within each of the batch's 2 groups" in note and "tether.Judge" in note


async def test_majority_mode_rewards_the_most_common_answer_one_and_the_others_zero() -> None:
    async with FakeLLM(handler=_script("it is 4", "so 4", "it is 5", "answer: 4", "")) as llm:
        report = await _dev(tether.MajorityVote(extract=last_word, mode="majority"), llm, ["2+2?"], repeats=5)
    # the empty reply extracts to None: not a vote, reward 0
    assert sorted((last_word(r.output) or "", r.reward) for r in report) == [
        ("", 0.0),
        ("4", 1.0),
        ("4", 1.0),
        ("4", 1.0),
        ("5", 0.0),
    ]
    (span,) = [s for r in report if last_word(r.output) == "5" for s in r.spans if s.name == "majority_vote"]
    assert span.attributes[spans.REWARD_REASON] == "answer '5': 1 of 5 agree (the most common: 3 of 5)"


async def test_majority_mode_gives_every_answer_tied_for_most_common_one() -> None:
    async with FakeLLM(handler=_script("4", "5", "4", "5")) as llm:
        report = await _dev(tether.MajorityVote(mode="majority"), llm, ["2+2?"], repeats=4)
    assert [r.reward for r in report] == [1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("mode", ["share", "majority"])
async def test_a_group_whose_most_common_answer_is_below_min_share_scores_zero(mode: str, tmp_path: Path) -> None:
    class Batches:
        def __init__(self) -> None:
            self.batches: list[tether.Batch] = []

        async def fit(self, session: Any, train: Any, val: Any) -> tether.FitResult:
            self.batches.append(await session.run_batch(train, 4))
            return tether.FitResult(run_dir=session.require_run("Batches").path)

    # each task's four answers (in whatever order its rollouts run): "sure?" 3 of 4 agree, "split?" 2 of 4
    algorithm = Batches()
    reward = tether.MajorityVote(extract=last_word, mode=mode, min_share=0.6)  # type: ignore[arg-type]
    async with FakeLLM(handler=lambda request: text(_by_task[_question(request)].pop(0))) as llm:
        backend = RemoteBackend(llm.base_url)
        try:
            trainer = tether.Trainer(model=backend, algorithm=algorithm, run_root=str(tmp_path), progress=False)
            await trainer.afit(tether.wrap(answer, reward=reward), ["sure?", "split?"], preflight=False)
        finally:
            await backend.close()
    (batch,) = algorithm.batches
    assert batch.group_metrics["majority/groups"] == 2.0 and batch.group_metrics["majority/skipped"] == 1.0
    by_task: dict[str, list[float]] = {}
    for rollout in batch.rollouts:
        by_task.setdefault(str(rollout.input), []).append(float(rollout.reward or 0.0))
    confident = [1.0, 1.0, 1.0, 0.0] if mode == "majority" else [0.75, 0.75, 0.75, 0.25]
    assert sorted(by_task["sure?"], reverse=True) == confident
    assert by_task["split?"] == [0.0, 0.0, 0.0, 0.0]  # 2 of 4 agree at most: below 0.6, no advantage


_by_task: dict[str, list[str]] = {}


def _question(request: dict[str, Any]) -> str:
    return str(request["messages"][-1]["content"])


@pytest.fixture(autouse=True)
def _answers() -> None:
    _by_task.clear()
    _by_task.update({"sure?": ["7", "7", "7", "8"], "split?": ["1", "1", "2", "3"]})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "vote"}, "MajorityVote(mode='vote'): use 'share'"),
        ({"min_share": 1.5}, "MajorityVote(min_share=1.5): give a share in [0, 1]"),
        ({"min_share": "0.5"}, "MajorityVote(min_share='0.5'): give a share in [0, 1]"),
        ({"history": 0}, "MajorityVote(history=0): give the number of recent groups kept"),
        ({"history": 2.5}, "MajorityVote(history=2.5): give the number of recent groups kept"),
    ],
)
def test_a_bad_mode_or_min_share_is_refused_with_what_to_give(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        tether.MajorityVote(**kwargs)


def test_contrast_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match=r"MajorityVote\(contrast='yes'\): give True .* or False"):
        tether.MajorityVote(contrast="yes")  # type: ignore[arg-type]


def test_the_repr_names_the_settings_that_differ_from_the_defaults() -> None:
    assert repr(tether.MajorityVote(extract=last_word)) == "MajorityVote(extract=last_word)"
    settings = tether.MajorityVote(mode="majority", min_share=0.5)
    assert repr(settings) == "MajorityVote(mode='majority', min_share=0.5)"
    assert repr(tether.MajorityVote(contrast=True)) == "MajorityVote(contrast=True)"
    assert repr(tether.MajorityVote(contrast=True, history=4)) == "MajorityVote(contrast=True, history=4)"
    assert repr(tether.MajorityVote(history=4)) == "MajorityVote(history=4)"


class _Steps:
    """An algorithm that runs one batch (groups of 4) per list of tasks it is given, in order."""

    def __init__(self, *steps: list[str]) -> None:
        self.steps = steps
        self.batches: list[tether.Batch] = []

    async def fit(self, session: Any, train: Any, val: Any) -> tether.FitResult:
        for tasks in self.steps:
            self.batches.append(await session.run_batch(tasks, 4))
        return tether.FitResult(run_dir=session.require_run("Steps").path)


async def _fit_steps(reward: Any, answers: dict[str, list[str]], tmp_path: Path, *steps: list[str]) -> _Steps:
    """Fit ``_Steps`` with each task's rollouts answering its listed answers (a cycle, in arrival order)."""
    cycles = {task: itertools.cycle(said) for task, said in answers.items()}
    algorithm = _Steps(*steps)
    async with FakeLLM(handler=lambda request: text(next(cycles[_question(request)]))) as llm:
        backend = RemoteBackend(llm.base_url)
        try:
            trainer = tether.Trainer(model=backend, algorithm=algorithm, run_root=str(tmp_path), progress=False)
            await trainer.afit(tether.wrap(answer, reward=reward), steps[0], preflight=False)
        finally:
            await backend.close()
    return algorithm


def _reason(result: Any) -> str:
    (span,) = [s for s in result.spans if s.kind == SpanKind.REWARD and s.name == "majority_vote"]
    return str(span.attributes[spans.REWARD_REASON])


def _by_answer(batch: tether.Batch) -> dict[tuple[str, str], float]:
    return {(str(r.input), str(r.output)): float(r.reward or 0.0) for r in batch.rollouts}


@pytest.mark.parametrize("contrast", [True, False])
async def test_an_answer_given_to_every_task_earns_nothing_beyond_chance(contrast: bool, tmp_path: Path) -> None:
    # three tasks, each answered "12" by 3 rollouts of 4 (whatever the task) and by its own answer once
    answers = {"p?": ["12", "12", "12", "1"], "q?": ["12", "12", "12", "2"], "r?": ["12", "12", "12", "3"]}
    tasks = list(answers)
    algorithm = await _fit_steps(tether.MajorityVote(contrast=contrast), answers, tmp_path, tasks, tasks)
    second = algorithm.batches[1]  # every group now has other tasks' groups in the history
    rewards = _by_answer(second)
    if contrast:  # "12": 3 of 4 agree, as 3 of 4 of the other tasks' rollouts say it: 0.75 - 0.75
        assert rewards == {
            **{(t, "12"): 0.0 for t in tasks},
            ("p?", "1"): 0.25,
            ("q?", "2"): 0.25,
            ("r?", "3"): 0.25,
        }
        assert second.group_metrics["majority/common_share"] == pytest.approx(0.75)
        for result in [r for r in second.results if r.rollout.output == "12"]:
            reason = _reason(result)
            assert reason.startswith("answer '12': 3 of 4 agree; 75% of ")
            assert reason.endswith(" recent rollouts of other tasks too: 0.75 - 0.75")
    else:  # the plain vote rewards the answer given to every task most
        assert rewards == {
            **{(t, "12"): 0.75 for t in tasks},
            ("p?", "1"): 0.25,
            ("q?", "2"): 0.25,
            ("r?", "3"): 0.25,
        }
        assert second.group_metrics["majority/common_share"] == pytest.approx(0.75)  # watched, not subtracted
        assert "majority/background" not in second.group_metrics


async def test_a_task_specific_agreeing_answer_keeps_its_share(tmp_path: Path) -> None:
    # each task's own answer by 3 of 4, and "0" once: only the repeated "0" is common to every task
    answers = {"p?": ["1", "1", "1", "0"], "q?": ["2", "2", "2", "0"], "r?": ["3", "3", "3", "0"]}
    tasks = list(answers)
    algorithm = await _fit_steps(tether.MajorityVote(contrast=True), answers, tmp_path, tasks, tasks)
    rewards = _by_answer(algorithm.batches[1])
    assert rewards == {("p?", "1"): 0.75, ("q?", "2"): 0.75, ("r?", "3"): 0.75, **{(t, "0"): 0.0 for t in tasks}}


@pytest.mark.parametrize(("history", "remembered"), [(2, 8), (32, 12)])
async def test_the_history_of_other_tasks_is_bounded(history: int, remembered: int, tmp_path: Path) -> None:
    # three groups of other tasks, then a task of its own: it sees the last `history` groups' rollouts
    answers = {"a?": ["7"] * 4, "b?": ["7"] * 4, "c?": ["7"] * 4, "d?": ["7", "7", "8", "8"]}
    reward = tether.MajorityVote(contrast=True, history=history)
    algorithm = await _fit_steps(reward, answers, tmp_path, ["a?", "b?", "c?"], ["d?"])
    (seven, _, eight, _) = sorted(algorithm.batches[1].results, key=lambda r: str(r.rollout.output))
    assert [_reason(seven), _reason(eight)] == [
        f"answer '7': 2 of 4 agree; 100% of {remembered} recent rollouts of other tasks too: 0.50 - 1.00",
        f"answer '8': 2 of 4 agree; 0% of {remembered} recent rollouts of other tasks too: 0.50 - 0.00",
    ]
    assert (seven.rollout.reward, eight.rollout.reward) == (0.0, 0.5)
    assert len(reward._recent) == min(history, 4)


@pytest.mark.parametrize("contrast", [True, False])
async def test_one_answer_for_every_task_is_said_in_the_notes(contrast: bool, tmp_path: Path) -> None:
    answers = {"p?": ["12"] * 4, "q?": ["12"] * 4, "r?": ["12"] * 4}
    tasks = list(answers)
    algorithm = await _fit_steps(tether.MajorityVote(contrast=contrast), answers, tmp_path, tasks, tasks)
    second = algorithm.batches[1]
    # agreement, but with the contrast no more than for other tasks; the plain vote pays it in full
    assert _by_answer(second) == {(t, "12"): 0.0 if contrast else 1.0 for t in tasks}
    assert second.group_metrics["majority/common_share"] == 1.0
    (note,) = [n for n in second.credit.notes if n.startswith("MajorityVote")]
    assert "100% of the recent rollouts of other tasks gave one and the same answer" in note
    # the fix it names: the other setting
    assert ("use contrast=False" in note) is contrast
    assert ("use MajorityVote(contrast=True)" in note) is not contrast
