"""Embedded-model benchmark: parameters, sampling speed and one GRPO-sized update, at 1 and 2 torch threads.

Run: ``.venv/bin/python bench/embedded.py [--preset tiny] [--repeats 3]``

- sampling: ``tether.models.local._sampling.generate`` (the backends' path: KV cache, finished rows dropped), 128
  new tokens per row at temperature 1 with stop tokens ignored so every row runs the full length; tokens/s at
  batch 1 and 16. For reference the same batch-16 job through ``model.generate(output_scores=True)``.
- update: batch 32 × 128 tokens (64 prompt + 64 response), a clipped policy-gradient loss on the response
  tokens, backward, gradient clipping and an AdamW step.

- ``--rescore``: the cost of a seeded row's reproducible logprobs (``_sampling._rescore``: one more forward
  pass of the row alone once it finishes) on a batch shaped like ``tether demo``'s requests (a system message,
  a calculator tool's schema and a question; 16 rows; a short reply): the same batch seeded and unseeded
  (unseeded rows keep the batched pass's logprobs), both times and their ratio, at 1 torch thread in CPU
  seconds (``time.process_time``: a busy shared machine stretches wall time, not the work done).

Each figure is the best of ``--repeats`` runs (the machine is shared: the best run is the least disturbed).
The thread count the backends default to (``tether.models.local._backend.DEFAULT_THREADS``) is chosen from this.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from tether.models.embedded import create_embedded, template
from tether.models.embedded.model import EmbeddedModel
from tether.models.local._sampling import SampleParams, generate


def _best(fn: Callable[[], float], repeats: int) -> float:
    fn()  # warm-up
    return min(fn() for _ in range(repeats))


def _prompts(model: EmbeddedModel, batch: int) -> list[list[int]]:
    texts = [template.render([{"role": "user", "content": f"What is {i * 37} + {i * 11}?"}]) for i in range(batch)]
    return [model.tokenizer.encode(t, add_special_tokens=False) for t in texts]


def sample_tokens_per_s(model: EmbeddedModel, batch: int, repeats: int, new_tokens: int = 128) -> float:
    prompts = _prompts(model, batch)
    params = [SampleParams(max_tokens=new_tokens, temperature=1.0, seed=i) for i in range(batch)]

    def run() -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            generate(model.model, model.tokenizer, prompts, params, stop_token_ids=[], rescore=True)
        return time.perf_counter() - start

    return batch * new_tokens / _best(run, repeats)


def hf_generate_tokens_per_s(model: EmbeddedModel, batch: int, repeats: int, new_tokens: int = 128) -> float:
    tok = model.tokenizer
    enc = tok(
        [tok.decode(p) for p in _prompts(model, batch)],
        return_tensors="pt",
        padding=True,
        padding_side="left",
        add_special_tokens=False,
    )

    def run() -> float:
        start = time.perf_counter()
        model.model.generate(
            **enc,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=tok.pad_token_id,
        )
        return time.perf_counter() - start

    return batch * new_tokens / _best(run, repeats)


CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression such as 12*7 and return the result.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "the expression"}},
            "required": ["expression"],
        },
    },
}


def rescore_seconds(
    model: EmbeddedModel, repeats: int, batch: int = 16, new_tokens: int = 16
) -> tuple[float, float, int]:
    """Seconds to sample a demo-shaped batch seeded (logprobs rescored) and unseeded; the prompt's tokens."""
    texts = [
        template.render(
            [
                {"role": "system", "content": "Solve the problem with the calculator."},
                {"role": "user", "content": f"Ben puts {i * 8 + 16} cups into 8 bags equally. How many in each?"},
            ],
            [CALCULATOR],
        )
        for i in range(batch)
    ]
    prompts = [model.tokenizer.encode(t, add_special_tokens=False) for t in texts]

    def timed(seeded: bool) -> Callable[[], float]:
        params = [SampleParams(max_tokens=new_tokens, seed=i if seeded else None) for i in range(batch)]

        def run() -> float:
            start = time.process_time()
            with torch.inference_mode():  # (stop tokens ignored: every row runs the full length either way)
                generate(model.model, model.tokenizer, prompts, params, stop_token_ids=[], rescore=True)
            return time.process_time() - start

        return run

    return _best(timed(True), repeats), _best(timed(False), repeats), max(len(p) for p in prompts)


def update_seconds(
    model: EmbeddedModel, repeats: int, batch: int = 32, prompt: int = 64, response: int = 64
) -> float:
    net = model.model
    vocab = net.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, prompt + response), generator=gen)
    old_logp = -torch.rand(batch, response, generator=gen) * 5
    advantages = torch.randn(batch, generator=gen)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-5)

    def run() -> float:
        start = time.perf_counter()
        net.train()
        logits = net(input_ids=ids).logits[:, prompt - 1 : -1].float()
        logp = torch.log_softmax(logits, -1).gather(2, ids[:, prompt:].unsqueeze(2)).squeeze(2)
        ratio = torch.exp(logp - old_logp)
        adv = advantages.unsqueeze(1)
        loss = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        net.eval()
        return time.perf_counter() - start

    return _best(run, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rescore", action="store_true", help="only the seeded rows' rescoring cost")
    args = parser.parse_args()
    model = create_embedded(preset=args.preset, seed=0)
    print(f"preset {args.preset}: {model.num_params:,} parameters, vocab {len(model.tokenizer)}")
    if args.rescore:
        torch.set_num_threads(1)
        seeded, unseeded, width = rescore_seconds(model, args.repeats)
        print(f"{width}-token prompts, 16 rows x 16 new tokens, CPU seconds at 1 thread:")
        print(f"seeded (rescored) {seeded:.3f}s, unseeded {unseeded:.3f}s, ratio {seeded / unseeded:.2f}")
        return
    print(f"{'threads':>7} {'tok/s b=1':>10} {'tok/s b=16':>11} {'hf.generate b=16':>17} {'update 32x128':>14}")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        b1 = sample_tokens_per_s(model, 1, args.repeats)
        b16 = sample_tokens_per_s(model, 16, args.repeats)
        hf16 = hf_generate_tokens_per_s(model, 16, args.repeats)
        step = update_seconds(model, args.repeats)
        print(f"{threads:>7} {b1:>10,.0f} {b16:>11,.0f} {hf16:>17,.0f} {step:>13.2f}s")


if __name__ == "__main__":
    main()
