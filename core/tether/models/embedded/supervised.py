"""Supervised warm start: teach the embedded model the output format from demonstration conversations.

The loss is on assistant tokens only (what the model would generate: the reply body and its end marker),
so the model learns to answer and to call tools in the template's format, not to predict user text.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from tether.models.embedded import template

_IGNORE = -100


def encode_conversation(
    tokenizer: Any, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
) -> tuple[list[int], list[int]]:
    """Token ids of a rendered conversation and labels (``-100`` except on assistant output tokens)."""
    ids: list[int] = []
    labels: list[int] = []
    for text, trained in template.segments(messages, tools):
        piece = tokenizer.encode(text, add_special_tokens=False)
        ids.extend(piece)
        labels.extend(piece if trained else [_IGNORE] * len(piece))
    return ids, labels


def _examples(
    tokenizer: Any, conversations: Sequence[Any], tools: Sequence[dict[str, Any]] | None, limit: int
) -> list[tuple[list[int], list[int]]]:
    out = []
    for i, conv in enumerate(conversations):
        messages, conv_tools = (
            (conv["messages"], conv.get("tools", tools)) if isinstance(conv, dict) else (conv, tools)
        )
        if not any(m.get("role") == "assistant" for m in messages):
            raise ValueError(f"conversation {i} has no assistant message: there is nothing to learn from it")
        ids, labels = encode_conversation(tokenizer, messages, conv_tools)
        out.append((ids[:limit], labels[:limit]))
    return out


def sft(
    model: Any,
    conversations: Sequence[Any],
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    epochs: int = 3,
    lr: float = 2e-3,
    batch_size: int = 16,
    seed: int = 0,
    progress: bool = True,
    weight_decay: float = 0.0,
    max_grad_norm: float = 1.0,
    threads: int | None = None,
) -> dict[str, float]:
    """Train ``model`` (an ``EmbeddedModel`` or ``EmbeddedBackend``) in place on demonstrations.

    ``threads`` sets torch's thread count (default: the backends' measured default, one: small models
    train faster on one thread than two here, and far faster when the other core is busy).

    ``conversations`` are lists of OpenAI messages (or ``{"messages": [...], "tools": [...]}`` dicts);
    ``tools`` applies to those that don't name their own. The learning rate warms up over the first 5% of
    steps and decays by cosine to a tenth. Returns ``steps``, ``tokens`` (trained tokens per epoch),
    ``loss_first`` (first batch), ``loss_last`` (mean over the last epoch) and ``seconds``.
    """
    if not conversations:
        raise ValueError("sft needs at least one demonstration conversation")
    if epochs < 1 or batch_size < 1 or lr <= 0:
        raise ValueError(f"sft needs epochs >= 1, batch_size >= 1 and lr > 0 (got {epochs}, {batch_size}, {lr})")
    from tether.models.local._backend import DEFAULT_THREADS

    torch.set_num_threads(threads or DEFAULT_THREADS)
    net, tokenizer = model.model, model.tokenizer
    limit = int(net.config.max_position_embeddings)
    examples = _examples(tokenizer, conversations, tools, limit)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    per_epoch = math.ceil(len(examples) / batch_size)
    total = per_epoch * epochs
    warmup = max(1, total // 20)

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        frac = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))

    params = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    gen = torch.Generator().manual_seed(seed)
    device = net.device
    lock = getattr(model, "weights_lock", None)
    started = time.perf_counter()
    first = math.nan
    last_epoch: list[float] = []
    bar = _Progress(total, progress)
    try:
        if lock is not None:
            lock.acquire()
        net.train()
        for _ in range(epochs):
            last_epoch = []
            order = torch.randperm(len(examples), generator=gen).tolist()
            for b in range(per_epoch):
                batch = [examples[i] for i in order[b * batch_size : (b + 1) * batch_size]]
                width = max(len(ids) for ids, _ in batch)
                input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
                labels = torch.full((len(batch), width), _IGNORE, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for r, (ids, lab) in enumerate(batch):
                    input_ids[r, : len(ids)] = torch.tensor(ids)
                    labels[r, : len(lab)] = torch.tensor(lab)
                    mask[r, : len(ids)] = 1
                loss = net(
                    input_ids=input_ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)
                ).loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
                optimizer.step()
                scheduler.step()
                value = float(loss.detach())
                first = value if math.isnan(first) else first
                last_epoch.append(value)
                bar.advance(value)
    finally:
        net.eval()
        bar.close()
        if lock is not None:
            lock.release()
            model.weights_version += 1
    trained = sum(sum(1 for x in lab if x != _IGNORE) for _, lab in examples)
    return {
        "steps": float(total),
        "tokens": float(trained),
        "loss_first": first,
        "loss_last": sum(last_epoch) / max(1, len(last_epoch)),
        "seconds": time.perf_counter() - started,
    }


class _Progress:
    """A rich progress bar with the running loss (or nothing when disabled)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._bar: Any = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("sft"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]:.3f}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._task = self._bar.add_task("sft", total=total, loss=float("nan"))
            self._bar.start()

    def advance(self, loss: float) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=1, loss=loss)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
