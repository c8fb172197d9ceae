"""One tether rollout → the training rows verl's V1 agent loop returns for it (pure; no verl import).

verl 0.9's V1 agent loop (``verl/trainer/ppo/v1/agent_loop_tq.py``) lets ``run()`` return a list of
outputs, one training row each, stored under ``{uid}_{session}_{index}``: ``uid`` is the dataset prompt's id
(the GRPO group), ``session`` the sample number among the ``rollout.n`` samples of that prompt, ``index`` the
row's position in the list. For GRPO verl computes a session's advantage from its *last* row only, read at
that row's first token with a response-mask of 1, and copies it to every row of the session
(``verl/trainer/ppo/v1/utils.py``): tether's per-rollout rule, where every LLM call of a rollout gets the
rollout's advantage.

So each LLM call (``Transition``) becomes one row: the prompt token ids and response token ids exactly as the
server produced them, a response mask of 1s for the sub-agents named in ``optimize=`` and 0s for the others
(kept, never trained), the sampler's logprobs and the rollout's reward. Rows of untrained sub-agents come
first, so the last row — the one verl reads the advantage from — is a trained one whenever the rollout has
one (an all-zero mask there would give the whole rollout an advantage of 0). A rollout without a reward gives
no row: it is left out of its group, as tether's own GRPO leaves it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from tether.types import Transition


@dataclass(slots=True)
class Row:
    """One training row: the fields of verl's ``AgentLoopOutput`` plus where verl stores it (``key``)."""

    key: str
    uid: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    reward_score: float
    num_turns: int
    extra_fields: dict[str, Any] = field(default_factory=dict)

    def output_fields(self) -> dict[str, Any]:
        """The keyword arguments of verl's ``AgentLoopOutput`` for this row (its ``metrics`` apart)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("key", "uid")}


def row_key(uid: str, session: int | str, index: int) -> str:
    """The key verl's V1 agent loop stores a row under: ``{uid}_{session}_{index}``."""
    return f"{uid}_{session}_{index}"


def rollout_rows(
    transitions: Sequence[Transition],
    *,
    reward: float | None,
    uid: str,
    session: int | str = 0,
    prompt_length: int | None = None,
    response_length: int | None = None,
    extra_fields: Mapping[str, Any] | None = None,
) -> list[Row]:
    """The rows of one rollout's ``transitions`` (its LLM calls, in order) for verl.

    ``reward`` is the rollout's reward (every row carries it: verl's GRPO uses the last row's), ``uid`` the
    dataset prompt's id verl groups by, ``session`` the sample number. ``prompt_length`` /
    ``response_length`` (verl's ``rollout.prompt_length`` / ``response_length``) cut a longer prompt on the
    left and a longer response on the right, as verl's own agent loops do. ``extra_fields`` are added to each
    row's ``extra_fields`` (verl's ``TokenOutput.extra_fields``: the weights version that sampled it).

    ``ValueError`` when a call has no token ids (the server must return them: vLLM's ``return_token_ids``).
    """
    if reward is None or not transitions:
        return []
    for t in transitions:
        if not t.prompt_token_ids or not t.response_token_ids:
            raise ValueError(
                f"LLM call {t.step} of rollout {t.rollout_id} has no token ids: the model server must return "
                "them (vLLM does when asked with return_token_ids; verl's servers are vLLM)"
            )
    with_logprobs = all(t.logprobs is not None for t in transitions)
    ordered = sorted(transitions, key=lambda t: (t.trainable, t.step))  # trained rows last, each in call order
    rows = []
    for index, t in enumerate(ordered):
        prompt = list(t.prompt_token_ids)
        response = list(t.response_token_ids)
        logprobs = list(t.logprobs) if with_logprobs and t.logprobs is not None else None
        if logprobs is not None and len(logprobs) != len(response):
            raise ValueError(
                f"LLM call {t.step} of rollout {t.rollout_id} has {len(logprobs)} logprobs for "
                f"{len(response)} response tokens"
            )
        if prompt_length is not None and len(prompt) > prompt_length:
            prompt = prompt[-prompt_length:]
        if response_length is not None and len(response) > response_length:
            response = response[:response_length]
            logprobs = logprobs[:response_length] if logprobs is not None else None
        extra = {
            # what verl's own agent loops always set, and what its V1 post-processing copies from the last
            # row to the others when the loop set the reward itself (a KeyError there without it)
            "turn_scores": [],
            "tool_rewards": [],
            "reward_extra_info": {},
            **(extra_fields or {}),
            "tether": {
                "rollout_id": t.rollout_id,
                "step": t.step,
                "agent": t.agent_name,
                "trainable": t.trainable,
            },
        }
        rows.append(
            Row(
                key=row_key(uid, session, index),
                uid=uid,
                prompt_ids=prompt,
                response_ids=response,
                response_mask=[1 if t.trainable else 0] * len(response),
                response_logprobs=logprobs,
                reward_score=float(reward),
                num_turns=len(t.messages) + 1,
                extra_fields=extra,
            )
        )
    return rows
