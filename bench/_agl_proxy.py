"""Agent Lightning's LLM proxy (its LiteLLM-based ``LLMProxy``) for ``bench/proxy.py``: run with AGL's own Python.

    /path/to/agl-venv/bin/python bench/_agl_proxy.py FAKE_BASE_URL ROLLOUTS

Starts an ``InMemoryLightningStore`` with ``ROLLOUTS`` started attempts and an ``LLMProxy`` (its default
middlewares and callbacks: rollout/attempt routing, stream conversion, token ids, OpenTelemetry spans into
the store) in front of the fake LLM, prints one JSON line with the attempts' OpenAI base URLs, and serves
until stdin closes. Never imported by tether (agentlightning is not a dependency).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of LiteLLM's price list at import
# recent LiteLLM refuses to start without a master key; AGL's LLMProxy sets none (a loopback bench)
os.environ.setdefault("LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY", "true")


async def main(fake_url: str, rollouts: int) -> None:
    from agentlightning import LLMProxy
    from agentlightning.store.memory import InMemoryLightningStore

    for name in ("agentlightning", "LiteLLM", "LiteLLM Proxy", "LiteLLM Router", "litellm", "uvicorn"):
        logging.getLogger(name).setLevel(logging.ERROR)
    store = InMemoryLightningStore(thread_safe=True)  # the proxy serves from its own thread
    attempts = [await store.start_rollout(input={"i": i}) for i in range(rollouts)]
    proxy = LLMProxy(
        port=None,
        host="127.0.0.1",  # loopback URLs, as tether's proxy and the fake LLM use
        model_list=[{"model_name": "m", "litellm_params": {"model": "hosted_vllm/m", "api_base": fake_url}}],
        store=store,
        launch_mode="thread",
    )
    await proxy.start()
    urls = [proxy.as_resource(a.rollout_id, a.attempt.attempt_id, model="m").endpoint for a in attempts]
    print("AGL_URLS", json.dumps(urls), flush=True)  # LiteLLM prints its banner on stdout too
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the bench closes stdin
    await proxy.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
