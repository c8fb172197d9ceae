"""``ServerPool``: a model backend over verl's vLLM servers, the one tether's proxy forwards to under verl.

verl starts one OpenAI-compatible vLLM server per rollout replica and pushes the actor's weights into them
itself; their ``host:port`` addresses come from ``LLMServerManager.get_addresses()``. The pool holds one
``RemoteBackend`` per server, asking each for token ids and logprobs (vLLM's ``return_token_ids`` and
``logprobs``), and sends each call to the server with the fewest calls in flight. Every call names the model
the servers serve (their ``/v1/models``): agents name their own models, which vLLM would reject.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import orjson

from tether.models.base import BackendError, ChatRequest, ChatResult, ModelBackend
from tether.models.remote import RemoteBackend


def base_url(address: str) -> str:
    """The OpenAI base URL of a verl server address (``host:port``, or a URL already)."""
    address = address.rstrip("/")
    if not address.startswith(("http://", "https://")):
        address = f"http://{address}"
    return address if address.endswith("/v1") else f"{address}/v1"


class ServerPool(ModelBackend):
    """Forward chat calls to the least busy of ``addresses`` (verl's vLLM servers).

    ``model``: the served model's name (default: the first server's first ``/v1/models`` entry).
    ``logprobs``: ask for the sampled tokens' logprobs (verl's ``rollout.calculate_log_probs``).
    ``defaults``: request parameters added to every call unless the agent set them (``top_k``, ...).
    """

    name = "verl"

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        model: str | None = None,
        logprobs: bool = True,
        defaults: Mapping[str, Any] | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        if not addresses:
            raise ValueError(
                "ServerPool needs at least one server address (verl's LLMServerManager.get_addresses())"
            )
        self.urls = [base_url(a) for a in addresses]
        self.model = model
        self.defaults = dict(defaults or {})
        self._servers = [
            RemoteBackend(url, return_token_ids=True, logprobs=logprobs, timeout_s=timeout_s) for url in self.urls
        ]
        self._in_flight = [0] * len(self._servers)
        self.calls = [0] * len(self._servers)

    async def start(self) -> None:
        for server in self._servers:
            await server.start()
        if self.model is None:
            self.model = await served_model(self.urls[0])
        for server in self._servers:
            server.model = self.model

    async def close(self) -> None:
        for server in self._servers:
            await server.close()

    async def chat(self, request: ChatRequest) -> ChatResult:
        index = min(range(len(self._servers)), key=self._in_flight.__getitem__)
        for name, value in self.defaults.items():
            request.extra.setdefault(name, value)
        self._in_flight[index] += 1
        self.calls[index] += 1
        try:
            return await self._servers[index].chat(request)
        finally:
            self._in_flight[index] -= 1


async def served_model(url: str, timeout_s: float = 30.0) -> str:
    """The first model an OpenAI-compatible server at ``url`` lists (``GET /models``)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.get(f"{url}/models") as resp,
        ):
            body = await resp.read()
            if resp.status != 200:
                raise BackendError(f"{url}/models answered {resp.status}: {body[:200]!r}")
        return str(orjson.loads(body)["data"][0]["id"])
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise BackendError(f"cannot list the models of {url}: {exc}") from None
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
        raise BackendError(f"{url}/models sent no model list ({exc})") from None
