"""The triage agent on tether's embedded model: capture (token ids, agent names) and a brief training run
of the example's ``train.py``. The model is untrained: only capture and the loop are checked, not answers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from triage_script import EXAMPLE_DIR, example, math_task, reward, words_task

import tether
from tether.trainer import Trainer
from tether.types import RolloutStatus

_EMBEDDED = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("tether.models.embedded")
pytestmark = pytest.mark.skipif(
    not _EMBEDDED, reason='the embedded model needs torch: pip install "tether[embedded]"'
)


def test_embedded_model_calls_are_captured_with_token_ids_and_agent_names() -> None:
    from tether.models.embedded import EmbeddedBackend

    agent = tether.wrap(example.triage_agent, reward=reward)
    report = Trainer(model=EmbeddedBackend(default_max_tokens=24), n_runners=2).dev(
        agent, [math_task(1), words_task("owl")]
    )
    assert len(report.rollouts) == 2
    for rollout in report.rollouts:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.transitions, str(rollout)
        assert rollout.transitions[0].agent_name == "triage_agent"
        for t in rollout.transitions:
            assert t.prompt_token_ids and t.response_token_ids
            assert t.logprobs is not None and len(t.logprobs) == len(t.response_token_ids)
            assert t.messages[0] == {"role": "system", "content": example.TRIAGE_PROMPT}
        assert {s.rollout_id for s in rollout.spans} == {rollout.rollout.rollout_id}


@pytest.mark.slow
def test_the_example_trains_briefly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("triage_openai_agents_train", EXAMPLE_DIR / "train.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    # the untrained model scores nothing, so the preflight would rightly stop it: this checks the loop's plumbing
    args = [
        "--steps",
        "1",
        "--group-size",
        "2",
        "--tasks-per-step",
        "2",
        "--run-root",
        str(tmp_path),
        "--no-preflight",
    ]
    assert train.main(args) == 0
    out = capsys.readouterr().out
    assert "before: {" in out and "after:  {" in out
    assert (tmp_path / "triage_openai_agents" / "metrics.jsonl").is_file()
