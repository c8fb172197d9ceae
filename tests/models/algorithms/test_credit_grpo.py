"""Credit rules reach GRPO's loss: on a tiny real Llama, a per-call emitted reward and a failed tool move the
log-probabilities of exactly the calls they concern; and through ``Trainer.fit`` on the embedded model, a
two-sub-agent agent's per-agent rewards and per-call returns are logged, and a rule that cannot apply warns
once per run."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether import spans  # noqa: E402
from tether.algorithms import credit_advantages  # noqa: E402
from tether.algorithms.grpo import GRPO  # noqa: E402
from tether.capture.context import agent_scope  # noqa: E402
from tether.training.engine.session import as_task  # noqa: E402
from tether.training.signal.batch import RolloutResult  # noqa: E402
from tether.training.signal.credit import CreditRule  # noqa: E402
from tether.training.signal.transitions import build_transitions  # noqa: E402
from tether.types import Rollout, RolloutStatus, Span, SpanKind  # noqa: E402

PROMPT = [1, 2, 3]
REWARDED, PENALISED, NEUTRAL = 5, 6, 7


def _model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=16,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    return LlamaForCausalLM(config)


def _logp(model: LlamaForCausalLM, token: int) -> float:
    with torch.no_grad():
        return float(torch.log_softmax(model(input_ids=torch.tensor([PROMPT])).logits[0, -1], -1)[token])


def _call(model: LlamaForCausalLM, token: int) -> Span:
    choice: dict[str, Any] = {"message": {"role": "assistant", "content": str(token)}}
    choice |= {"response_token_ids": [token], "logprobs": [_logp(model, token)]}
    attributes: dict[str, Any] = {"call_id": "c", "request": {"messages": [], "tools": None, "params": {}}}
    attributes |= {"prompt_token_ids": list(PROMPT), "choices": [choice]}
    return Span(
        rollout_id="", attempt_id="", kind=SpanKind.LLM, name=spans.LLM_CALL, agent_name="a", attributes=attributes
    )


def _result(rid: str, events: list[Span]) -> RolloutResult:
    rollout = Rollout(rollout_id=rid, input="x", task_id="t", status=RolloutStatus.SUCCEEDED, reward=1.0)
    for i, span in enumerate(events):
        span.rollout_id, span.attempt_id, span.sequence = rid, rid, i
    built = build_transitions(rollout, events)
    return RolloutResult(
        rollout, events, 1, built.transitions, [], built.agent_names, {}, built.emitted_rewards, built.tool_spans
    )


@pytest.mark.parametrize("credit", ["episode", "per_call"])
def test_per_call_credit_moves_the_rewarded_and_the_penalised_call_apart(credit: CreditRule) -> None:
    model = _model()
    rewarded = [
        _call(model, REWARDED),
        Span(
            rollout_id="",
            attempt_id="",
            kind=SpanKind.REWARD,
            name="reward",
            attributes=spans.reward_attributes(1.0),
        ),
    ]
    failed_tool = spans.tool_attributes("calc", {}, error="ValueError: bad expression")
    penalised = [
        _call(model, PENALISED),
        Span(rollout_id="", attempt_id="", kind=SpanKind.TOOL, name="calc", attributes=failed_tool),
    ]
    # both rollouts end with the same final reward: only the emitted reward and the failed tool tell them apart
    results = [
        _result("r1", [*rewarded, _call(model, NEUTRAL)]),
        _result("r2", [*penalised, _call(model, NEUTRAL)]),
    ]
    before = {t: _logp(model, t) for t in (REWARDED, PENALISED)}
    trainable, stats = credit_advantages(results, credit=credit, tool_error_penalty=0.5)
    metrics = GRPO(group_size=2, lr=1e-2).update(model, trainable)
    after = {t: _logp(model, t) for t in (REWARDED, PENALISED)}
    if credit == "episode":  # equal final rewards: a flat group, nothing trains
        assert trainable == [] and metrics["trained_transitions"] == 0 and after == before
        return
    first = [r.transitions[0].advantage for r in results]
    assert first[0] is not None and first[1] is not None and first[0] > 0 > first[1]
    assert [r.transitions[1].advantage for r in results] == [0.0, 0.0]  # the NEUTRAL calls: a flat step group
    assert stats.step_groups == 2 and metrics["trained_transitions"] == 2
    assert after[REWARDED] > before[REWARDED] and after[PENALISED] < before[PENALISED], (before, after)


# -- through Trainer.fit on the embedded model ----------------------------------------------------------------

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
GOOD = {"a", "b"}


def pick_and_check(task: str) -> dict[str, str]:
    """Two sub-agents: a picker answers, a checker answers again; each is scored on its own."""
    out = {}
    for name in ("picker", "checker"):
        with agent_scope(name):
            reply = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}])
        out[name] = (reply.choices[0].message.content or "").strip()
        if name == "picker":
            tether.emit_reward(0.5 * (out[name] in GOOD), agent="picker")
    return out


def pick_letter(task: str) -> str:
    reply = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


def per_agent(task: str, output: dict[str, str]) -> dict[str, float]:
    return {name: float(answer in GOOD) for name, answer in output.items()}


def _trainer(checkpoint: Path, run_root: Path, **kwargs: Any) -> tether.Trainer:
    return tether.Trainer(
        model=f"embedded:{checkpoint}",
        algorithm=GRPO(group_size=4, tasks_per_step=2, lr=2e-3),
        n_runners=8,
        steps=2,
        eval_every=2,
        name="credit",
        run_root=str(run_root),
        progress=False,
        sampling={"max_tokens": 4},
        **kwargs,
    )


def test_fit_with_per_agent_rewards_and_per_call_credit(warm_start: Path, tmp_path: Path) -> None:
    agent = tether.wrap(pick_and_check, reward=per_agent)
    tasks = [f"Pick a letter, round {i}." for i in range(4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _trainer(warm_start, tmp_path, credit="per_call", gamma=0.9).fit(agent, train=tasks, val=tasks)
    assert not [w for w in caught if "found no emitted rewards" in str(w.message)]
    train = [h for h in result.history if h["kind"] == "train"]
    assert len(train) == 2 and all(h["failed"] == 0 and h["transitions"] == 16 for h in train)
    # 2 tasks x 2 sub-agents, one call each: 4 step groups of 4 calls (the rollouts of a task)
    assert all(h["step_groups"] == 4 and h["step_fallbacks"] == 0 for h in train)
    assert all(set(h) >= {"reward/picker", "reward/checker"} for h in train)
    evals = [h for h in result.history if h["kind"] == "eval"]
    assert all({"greedy_accuracy/picker", "greedy_accuracy/checker"} <= set(h) for h in evals)
    for h in evals:  # the rollout's reward is the mean of its sub-agents' rewards
        mean = (h["greedy_accuracy/picker"] + h["greedy_accuracy/checker"]) / 2
        assert h["greedy_accuracy"] == pytest.approx(mean)


def pick_then_check(task: str) -> str:
    """The picker answers and is rewarded on the spot for a good letter; then the checker answers, unscored."""
    with agent_scope("picker"):
        answer = pick_letter(task).strip()
    tether.emit_reward(float(answer in GOOD))  # for the latest call: the picker's
    with agent_scope("checker"):
        pick_letter(task)
    return answer


async def test_a_per_call_reward_on_the_embedded_model_trains_exactly_the_calls_it_rewards(
    warm_start: Path,
) -> None:
    agent = tether.wrap(pick_then_check, reward=lambda t, o: 0.0)  # no final signal: only the emitted reward
    trainer = tether.Trainer(model=f"embedded:{warm_start}", n_runners=8, sampling={"max_tokens": 4})
    async with trainer.session(agent) as session:
        tasks = [as_task(f"Pick a letter, round {i}.") for i in range(4)]  # (a task's rollouts share its id)
        batch = await session.run_batch(tasks, 8, {"temperature": 1.0}, tether.Mode.TRAIN)
        assert credit_advantages(batch.results, credit="episode")[0] == []  # every final reward is 0: flat
        trainable, stats = credit_advantages(batch.results, credit="per_call")
        assert stats.step_groups == 8 and stats.notes == []
        for r in batch.results:
            picker, checker = r.transitions
            good = r.rollout.output in GOOD
            assert checker.advantage == 0.0 and (picker.advantage or 0.0) * (1 if good else -1) >= 0
        assert {t.agent_name for t in trainable} == {"picker"}
        backend = session.backend
        assert isinstance(backend, tether.TrainableBackend)
        with backend.policy() as model:
            before = [_response_logp(model, t) for t in trainable]
            GRPO(group_size=8, lr=1e-3).update(model, trainable, pad_token_id=backend.pad_token_id)
            after = [_response_logp(model, t) for t in trainable]
    gain: dict[bool, list[float]] = {
        True: [],
        False: [],
    }  # how far each response's log-probability moved, by the sign of its advantage
    for t, a, b in zip(trainable, after, before, strict=True):
        gain[(t.advantage or 0.0) > 0].append(a - b)
    assert gain[True] and gain[False], gain
    assert sum(gain[True]) / len(gain[True]) > 0 > sum(gain[False]) / len(gain[False]), gain


def _response_logp(model: Any, t: Any) -> float:
    ids = torch.tensor([t.prompt_token_ids + t.response_token_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
    n = len(t.prompt_token_ids)
    return float(sum(logp[n - 1 + i, tok] for i, tok in enumerate(t.response_token_ids)))


def test_per_call_without_emitted_rewards_warns_once_per_run(warm_start: Path, tmp_path: Path) -> None:
    agent = tether.wrap(pick_letter, reward=lambda t, o: float(o.strip() in GOOD))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # (no preflight: one task's group of a barely trained model may score all 0, which it would stop)
        _trainer(warm_start, tmp_path, credit="per_call").fit(
            agent, train=["Pick a letter, round 1."], preflight=False
        )
    notes = [w for w in caught if "credit='per_call' found no emitted rewards" in str(w.message)]
    assert len(notes) == 1, [str(w.message) for w in caught]
