"""Batched sampling: token ids decode to the returned text, logprobs are sane, greedy is deterministic,
stop strings / stop tokens / max_tokens are honoured; the cache-based loop agrees with a full forward."""

from __future__ import annotations

import math

import pytest
import torch

from tether.models.embedded import EmbeddedModel, template
from tether.models.local._sampling import Sample, SampleParams, choose, generate


def _prompts(nano: EmbeddedModel, k: int) -> list[list[int]]:
    tok = nano.tokenizer
    texts = [
        template.render([{"role": "user", "content": f"What is {i}*{i + 3}? " * (1 + i % 3)}]) for i in range(k)
    ]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def _run(nano: EmbeddedModel, prompts: list[list[int]], params: list[SampleParams]) -> list[Sample]:
    with torch.inference_mode():
        return generate(nano.model, nano.tokenizer, prompts, params, stop_token_ids=nano.stop_token_ids)


def _assert_full_forward_logprobs(nano: EmbeddedModel, prompts: list[list[int]], samples: list[Sample]) -> None:
    """Each sample's logprobs are what one forward pass of its prompt and tokens alone gives."""
    for prompt, s in zip(prompts, samples, strict=True):
        with torch.no_grad():
            logits = nano.model(torch.tensor([prompt + s.token_ids])).logits[0]
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1].float(), -1)
        expected = logp.gather(1, torch.tensor(s.token_ids).unsqueeze(1)).squeeze(1)
        assert torch.allclose(expected, torch.tensor(s.logprobs), atol=1e-4)


def test_ids_decode_to_text_and_logprobs_are_sane(nano: EmbeddedModel) -> None:
    prompts = _prompts(nano, 8)
    samples = _run(nano, prompts, [SampleParams(max_tokens=40, temperature=1.0, seed=i) for i in range(8)])
    assert len(samples) == 8
    for s in samples:
        assert nano.tokenizer.decode(s.token_ids, skip_special_tokens=True) == s.text
        assert len(s.logprobs) == len(s.token_ids) >= 1
        assert all(math.isfinite(lp) and lp <= 0 for lp in s.logprobs)
        assert s.finish_reason in ("stop", "length")
        if s.finish_reason == "stop":
            assert s.token_ids[-1] in nano.stop_token_ids
            assert not set(s.token_ids[:-1]) & set(nano.stop_token_ids)
        else:
            assert len(s.token_ids) == 40


def test_logprobs_match_a_full_forward_pass(nano: EmbeddedModel) -> None:
    """Left padding, positions and the KV cache are right: recomputing without them gives the same logprobs."""
    prompts = _prompts(nano, 4)
    samples = _run(nano, prompts, [SampleParams(max_tokens=12, temperature=1.0, seed=7 + i) for i in range(4)])
    _assert_full_forward_logprobs(nano, prompts, samples)


def test_greedy_is_deterministic_and_independent_of_the_batch(nano: EmbeddedModel) -> None:
    prompts = _prompts(nano, 6)
    greedy = [SampleParams(max_tokens=16, temperature=0.0) for _ in prompts]
    first = _run(nano, prompts, greedy)
    again = _run(nano, prompts, greedy)
    alone = _run(nano, prompts[2:3], greedy[2:3])
    assert [s.token_ids for s in first] == [s.token_ids for s in again]
    assert alone[0].token_ids == first[2].token_ids


def test_seeded_sampling_is_reproducible_and_varies_without_seed(nano: EmbeddedModel) -> None:
    prompt = _prompts(nano, 1) * 6
    seeded = [SampleParams(max_tokens=20, temperature=1.0, seed=123) for _ in prompt]
    a = _run(nano, prompt, seeded)
    assert len({tuple(s.token_ids) for s in a}) == 1
    free = _run(nano, prompt, [SampleParams(max_tokens=20, temperature=1.0) for _ in prompt])
    assert len({tuple(s.token_ids) for s in free}) > 1


def test_max_tokens_per_row(nano: EmbeddedModel) -> None:
    prompts = _prompts(nano, 3)
    params = [SampleParams(max_tokens=m, temperature=1.0, seed=1) for m in (1, 5, 30)]
    samples = _run(nano, prompts, params)
    for s, p in zip(samples, params, strict=True):
        assert 1 <= len(s.token_ids) <= p.max_tokens
        if s.finish_reason == "length":
            assert len(s.token_ids) == p.max_tokens


def test_stop_strings_cut_the_text_before_them(nano: EmbeddedModel) -> None:
    prompts = _prompts(nano, 1) * 16
    free = _run(nano, prompts, [SampleParams(max_tokens=30, temperature=1.0, seed=i) for i in range(16)])
    # choose a stop string that these seeded samples will produce: a mid-text character of the first sample
    text = next(s.text for s in free if len(s.text) > 6)
    stop = text[3:5]
    stopped = _run(nano, prompts, [SampleParams(30, 1.0, 1.0, (stop,), seed=i) for i in range(16)])
    hit = 0
    for s, f in zip(stopped, free, strict=True):
        assert stop not in s.text
        assert nano.tokenizer.decode(s.token_ids, skip_special_tokens=True) == s.text
        assert f.token_ids[: len(s.token_ids)] == s.token_ids  # same draws up to the cut
        if stop in f.text:
            hit += 1
            assert s.finish_reason == "stop" and f.text.startswith(s.text)
            assert len(s.text) <= f.text.index(stop)
    assert hit >= 1


def test_top_p_and_temperature_shape_the_distribution() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]] * 3)
    u = torch.tensor([0.999, 0.999, 0.5])
    tokens, lps = choose(logits, torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0, 0.5, 1.0]), u)
    assert tokens.tolist()[0] == 3  # the tail token is reachable without top_p
    assert tokens.tolist()[1] == 0  # top_p=0.5 keeps only the most likely token here (p≈0.64)
    assert lps[1].item() == pytest.approx(0.0, abs=1e-6)  # under the truncated distribution it was certain
    assert tokens.tolist()[2] == 0  # greedy
    assert lps[2].item() == pytest.approx(torch.log_softmax(logits[2], -1)[0].item())
    cold, cold_lp = choose(logits[:1], torch.tensor([0.05]), torch.tensor([1.0]), torch.tensor([0.9]))
    assert cold.item() == 0 and cold_lp.item() > -1e-3


def test_generate_rejects_mismatched_inputs(nano: EmbeddedModel) -> None:
    with pytest.raises(ValueError, match="one SampleParams per prompt"):
        _run(nano, _prompts(nano, 2), [SampleParams(max_tokens=3)])


def test_a_prefix_every_row_shares_is_computed_once_and_changes_nothing(nano: EmbeddedModel) -> None:
    """Rows that share a long prefix (an agent's system turn and tools) run it through the model once for the
    batch; unseeded rows (whose logprobs are not recomputed) still get a full forward pass's logprobs."""
    from tether.models.local._prefix_fill import MIN_SHARED_PREFIX

    system = "Use the calculator. " * 4
    texts = [
        template.render(
            [{"role": "system", "content": system}, {"role": "user", "content": f"What is {i}+{i * 7}?"}]
        )
        for i in range(5)
    ]
    prompts = [nano.tokenizer.encode(t, add_special_tokens=False) for t in texts]
    shared = 0
    while all(p[shared] == prompts[0][shared] for p in prompts):
        shared += 1
    assert shared >= MIN_SHARED_PREFIX
    runs: list[int] = []
    forward = nano.model.forward

    def counted(*args: object, **kwargs: object) -> object:
        ids = kwargs.get("input_ids")
        assert isinstance(ids, torch.Tensor)
        runs.append(ids.shape[1])
        return forward(*args, **kwargs)

    nano.model.forward = counted  # type: ignore[method-assign]
    try:
        samples = _run(nano, prompts, [SampleParams(max_tokens=8, temperature=1.0) for _ in prompts])
    finally:
        del nano.model.forward
    assert runs[0] == shared and runs[1] == max(len(p) for p in prompts) - shared  # the prefix once, then the rest
    _assert_full_forward_logprobs(nano, prompts, samples)
