"""``tether serve``: a model, or what a run trained, as an OpenAI-compatible endpoint for the user's agent.

``ModelServer`` is the proxy (``tether.proxy.server.ProxyServer``) in serve mode: the same HTTP server, request
validation, backends, Chat Completions and Responses API, streaming and error shapes, without rollouts (a
``/r/...`` URL is answered 404) and so without recording anything. Beyond loopback it needs a ``token``, and
then every request but ``GET /health`` must carry ``Authorization: Bearer <token>`` (an OpenAI client's
``api_key``), else 401.

``model_for(target, policy)`` turns what the user names into a ``model=`` string (``tether.models.open_backend``):

- a run folder (``runs/<name>``: its ``checkpoint/``) or a checkpoint folder: ``hf:<checkpoint>``, which serves
  full weights (a transformers checkpoint; the embedded model's too, with its compact chat template) and a LoRA
  adapter on the base it records. A checkpoint of several policies (``optimize={policy: [...]}``,
  ``policies.json``) serves the ``policy`` asked for (the only one when it holds one);
- anything else: a ``model=`` string as it is (``"smollm2"``, ``"hf:Qwen/..."``, ``"embedded:<dir>"``, an
  ``http(s)://`` server to pass through).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from pathlib import Path

from tether._net import is_loopback, run_until_signalled, unbracket
from tether.capture.span_batcher import SpanBatcher
from tether.models.base import ModelBackend
from tether.proxy._http_server import Request, Response
from tether.proxy.server import ProxyServer
from tether.store.memory import MemoryStore

#: the environment variable ``tether serve --token`` reads
TOKEN_ENV = "TETHER_SERVE_TOKEN"
_MANIFEST = "policies.json"  # tether.models.local._policies.MANIFEST (not imported: that module is the backends')


class ModelServer(ProxyServer):
    """Serve ``backend`` on ``host:port`` (0: a free port) to agents, at ``{url}/v1``; closes the backend on
    ``stop`` unless ``close_backend`` is false."""

    def __init__(
        self,
        backend: ModelBackend,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        close_backend: bool = True,
    ) -> None:
        check_host(host, token)
        self._expected = f"Bearer {token}".encode() if token else None
        # nothing is recorded (no attempt is ever open), but the proxy wants a batcher to hand spans to
        super().__init__(
            backend, batcher=SpanBatcher(MemoryStore()), host=host, port=port, close_backend=close_backend
        )

    @property
    def base_url(self) -> str:
        """The OpenAI base URL agents are given."""
        return f"{self.url}/v1"

    async def stop(self) -> None:
        await super().stop()
        await self.batcher.close()

    async def _route(self, request: Request) -> Response:
        if self._expected is not None and request.path != "/health":
            given = request.headers.get("authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, self._expected):
                what = "wrong bearer token" if given else "missing bearer token"
                return self._error(
                    401,
                    f"{what}: the model server needs 'Authorization: Bearer <token>' (an OpenAI client's api_key)",
                    kind="invalid_request_error",
                    code="invalid_api_key",
                )
        if request.path.startswith("/r/"):
            return self._unknown(request, "`tether serve` serves no rollouts (its URL is /v1)")
        return await super()._route(request)


def check_host(host: str, token: str | None) -> None:
    """Refuse to serve a model beyond this machine without a token (ValueError naming the fix)."""
    if not token and not is_loopback(unbracket(host)):
        raise ValueError(
            f"refusing to serve the model on {host!r} without a token: anyone who can reach it could use it. "
            f"Pass --token <secret> (or set {TOKEN_ENV}; clients send it as their api_key), or bind 127.0.0.1"
        )


def model_for(target: str, policy: str | None = None) -> str:
    """The ``model=`` string that serves ``target`` (a run folder, a checkpoint folder, or a ``model=`` string);
    ValueError naming the fix."""
    folder = Path(target).expanduser()
    if not folder.is_dir():
        if policy is not None:
            raise ValueError(
                f"--policy {policy!r} picks a policy of a checkpoint folder; {target!r} is not a folder"
            )
        return target
    checkpoint = _checkpoint(folder)
    manifest = checkpoint / _MANIFEST
    if manifest.is_file():
        names = list(json.loads(manifest.read_text()).get("policies") or [])
        if policy is None and len(names) == 1:
            policy = names[0]
        if policy not in names:
            asked = "no --policy given" if policy is None else f"--policy {policy!r} is not one of them"
            raise ValueError(
                f"{checkpoint} holds the policies {names} ({asked}): pass --policy <name> to serve one; the "
                "frozen start is the base model, served by its own model= string"
            )
        checkpoint = checkpoint / "policies" / str(policy)
    elif policy is not None:
        raise ValueError(f"{checkpoint} holds one policy's weights: drop --policy {policy!r}")
    return f"hf:{checkpoint}"


def _checkpoint(folder: Path) -> Path:
    """The checkpoint folder ``folder`` is or holds (a run folder's ``checkpoint/``)."""
    if (folder / "config.json").is_file() or (folder / "adapter_config.json").is_file():
        return folder
    if (folder / "checkpoint").is_dir():
        return folder / "checkpoint"
    if (folder / "metrics.jsonl").is_file():
        raise ValueError(
            f"{folder} is a run folder without a checkpoint yet: a run writes {folder / 'checkpoint'} when it "
            "saves (each few steps, and at the end of fit)"
        )
    raise ValueError(
        f"{folder} is neither a run folder (with checkpoint/) nor a checkpoint (config.json, or a LoRA adapter's "
        "adapter_config.json)"
    )


def serve(
    target: str, *, host: str = "127.0.0.1", port: int = 8000, token: str | None = None, policy: str | None = None
) -> None:
    """Serve ``target`` (``model_for``) until SIGINT/SIGTERM; prints the base URL once listening."""
    from tether.models import open_backend

    check_host(host, token)
    model = model_for(target, policy)
    backend = open_backend(model)  # before binding: a bad model string or a missing extra fails first
    server = ModelServer(backend, host=host, port=port, token=token)
    asyncio.run(_serve(server, model))


async def _serve(server: ModelServer, model: str) -> None:
    await server.start()
    await run_until_signalled(server.stop, f"tether serve: {model} at {server.base_url}", "tether serve stopped")
