"""The processes the proxy benchmark talks to (for ``bench/proxy.py``): the fake LLM (its answer time carried in
the request), tether's proxy on a memory store with open attempts, Agent Lightning's LLMProxy and the
byte-forwarding floor proxy."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import subprocess
import threading
from typing import Any

import orjson

ROLLOUTS = 32
#: the fake LLM's answer time in ms, drawn uniformly from (low, high) per call
Delay = tuple[float, float]
QUESTION = "What is the capital of France? Reply with one word."
#: the fake LLM's answer time travels in the message (every proxy forwards messages as they are; AGL's drops
#: ``metadata`` and ``user``)
_DELAY = re.compile(r"\[bench_delay_ms=([0-9.]+)(?:-([0-9.]+))?\]")


def _body(delay: Delay) -> dict[str, Any]:
    low, high = delay
    question = f"{QUESTION} [bench_delay_ms={low:g}-{high:g}]"
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": question},
        ],
        "temperature": 0.7,
        "max_tokens": 32,
    }


def _serve_fake(queue: Any) -> None:
    from tether.testing.fake_llm import FakeLLM, text

    draw = random.Random(0).uniform

    def answer(request: dict[str, Any]) -> Any:
        found = _DELAY.search(str(request["messages"][-1].get("content")))
        delay_ms = float(found.group(1)) if found else 0.0
        if found and found.group(2):  # an answer time drawn uniformly from a range (a jittered model)
            delay_ms = draw(delay_ms, float(found.group(2)))
        return text("Paris is the capital of France.", delay_s=delay_ms / 1000.0)

    async def main() -> None:
        llm = FakeLLM(handler=answer)
        await llm.start()
        queue.put(llm.base_url)
        await asyncio.Event().wait()

    asyncio.run(main())


async def _start_proxy(fake_url: str, stack: contextlib.AsyncExitStack) -> list[str]:
    """A proxy on a memory store with ``ROLLOUTS`` open attempts (closed with ``stack``), and their URLs."""
    from tether.capture import span_batcher
    from tether.models.remote import RemoteBackend
    from tether.proxy import ProxyServer
    from tether.store.memory import MemoryStore
    from tether.types import RolloutSpec

    store = MemoryStore()
    await store.enqueue([RolloutSpec(input=i) for i in range(ROLLOUTS)])
    claimed = await store.dequeue("bench", limit=ROLLOUTS)
    # as the trainer's session makes it (a commit before ``quiet_s`` existed: its default batcher)
    quiet = getattr(span_batcher, "PROXY_QUIET_S", None)
    batcher = span_batcher.SpanBatcher(store, **({"quiet_s": quiet} if quiet else {}))
    await stack.enter_async_context(batcher)
    backend = RemoteBackend(fake_url, model="m", return_token_ids=True)
    proxy = await stack.enter_async_context(ProxyServer(backend, batcher=batcher, close_backend=True))
    return [await stack.enter_async_context(proxy.attempt(r.rollout_id, a.attempt_id)) for r, a in claimed]


def _serve_proxy(fake_url: str, queue: Any, uvloop: bool = False) -> None:
    if uvloop:  # the proxy process on uvloop's event loop (libuv) instead of asyncio's
        import uvloop as _uvloop

        _uvloop.install()

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            queue.put(await _start_proxy(fake_url, stack))
            await asyncio.Event().wait()

    asyncio.run(main())


def _start_agl(python: str, fake_url: str) -> tuple[subprocess.Popen[str], list[str]]:
    """Agent Lightning's LLMProxy in front of ``fake_url``, run by ``python``; the process and its URLs."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_agl_proxy.py")
    process = subprocess.Popen(
        [python, script, fake_url, str(ROLLOUTS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("AGL_URLS "):
            # drain what LiteLLM prints from now on, so that a full pipe never stalls its proxy
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, orjson.loads(line.split(" ", 1)[1])
    raise RuntimeError(
        f"Agent Lightning's LLMProxy did not start (exit status {process.wait()}): run "
        f"`{python} {script} {fake_url} 1` to see why"
    )


def _serve_floor(fake_url: str, queue: Any) -> None:
    from _floor_proxy import serve  # bench/ is this script's directory: on the spawned process's path too

    serve(fake_url, queue, ROLLOUTS)
