"""``HttpStore``: the ``Store`` contract over HTTP, talking to ``tether store serve`` (``http://host:port``).

Requests go over a small keep-alive HTTP/1.1 client (``tether._http11``), its connections pooled per
store on the running loop: a runner makes several store calls per rollout, and a general client's per-request
overhead was most of their cost. Arguments are checked
here the way every backend checks them, then again by the server; errors the server reports come back as
the same exception class (``NotFound``, ``InvalidTransition``, ``InvalidInput``) with the same message.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode

from tether import _json
from tether._http11 import BadResponse, ConnectFailed, Http11Pool, Lost
from tether.store._validate import Ending, validate_span, validate_spec
from tether.store.base import Harvested, ImportedRollout, ImportResult, Store, validate_import
from tether.store.errors import InvalidInput, StoreError, validate_int, validate_number
from tether.store.http import _wire
from tether.store.rollout_query import RolloutPage, RolloutQuery, VersionUsage, usage_of
from tether.types import Attempt, Mode, Resources, Rollout, Span

if TYPE_CHECKING:
    from tether.types import LLMEndpoint, PromptTemplate, RolloutSpec, RolloutStatus

__all__ = ["HttpStore", "StoreUnauthorized", "StoreUnavailable"]

_T = TypeVar("_T")
_WAIT_CHUNK_S = 30.0  # one long poll; below the server's cap


class StoreUnavailable(StoreError, ConnectionError):
    """No store server answers at the URL (not started, wrong port, or it went away)."""


class StoreUnauthorized(StoreError, PermissionError):
    """The server wants a bearer token that was not given, or a different one."""


def _q(value: str) -> str:
    return quote(str(value), safe="")


def _checked(items: Sequence[_T], check: Callable[[_T], None]) -> list[_T]:
    """``items`` as a list, each passed to ``check`` (which raises for a bad one)."""
    out = list(items)
    for item in out:
        check(item)
    return out


class HttpStore(Store):
    """A store served by ``tether store serve`` at ``url``; ``token`` defaults to ``TETHER_STORE_TOKEN``."""

    def __init__(self, url: str, token: str | None = None) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"HttpStore needs an http://host:port URL, got {url!r}")
        self.url = url.rstrip("/")
        token = token if token is not None else os.environ.get("TETHER_STORE_TOKEN") or None
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._pool = Http11Pool(self.url, headers, limit=256)  # as many connections as before (aiohttp)
        self._closed = False

    def __repr__(self) -> str:
        return f"HttpStore({self.url!r})"

    # -- transport ----------------------------------------------------------------------------------------

    async def _call(self, method: str, path: str, payload: bytes | None = None, params: Any = None) -> Any:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        if params:
            path += "?" + urlencode(params)
        try:
            status, raw = await self._pool.request(method, path, payload)
        except ConnectFailed as exc:
            raise StoreUnavailable(
                f"no tether store at {self.url}: start one with `tether store serve` ({exc})"
            ) from None
        except Lost as exc:
            raise StoreUnavailable(f"lost the tether store at {self.url} during {method} {path}: {exc}") from None
        except BadResponse as exc:
            raise StoreError(f"the server at {self.url} is not a tether store? {exc}") from None
        if status == 200:
            return _json.loads(raw)
        self._raise(status, raw)

    def _raise(self, status: int, raw: bytes) -> None:
        try:
            err = _json.loads(raw)["error"]
            type_name, message = str(err["type"]), str(err["message"])
        except (ValueError, KeyError, TypeError):
            text = raw[:300].decode("utf-8", "replace")
            raise StoreError(f"the server at {self.url} is not a tether store? HTTP {status}: {text}") from None
        if status == 401:
            raise StoreUnauthorized(
                f"the tether store at {self.url} refused the request ({message}); pass token= to "
                "open_store/HttpStore or set TETHER_STORE_TOKEN to the token the server was started with"
            )
        if status == 503:
            raise StoreUnavailable(f"the tether store at {self.url} is unavailable: {message}")
        known = _wire.ERRORS.get(type_name)
        if known is not None and known[0] is not StoreError:
            raise known[0](message)
        raise StoreError(f"tether store at {self.url}: HTTP {status} {type_name}: {message}")

    @staticmethod
    def _encode(body: Any, what: str) -> bytes:
        try:
            return _json.dumps(body)
        except TypeError as exc:
            raise InvalidInput(f"{what}: {exc}") from None

    # -- rollouts -----------------------------------------------------------------------------------------

    async def enqueue(self, specs: Sequence[RolloutSpec]) -> list[Rollout]:
        specs = _checked(specs, validate_spec)
        if not specs:
            return []
        data = await self._call("POST", "/v1/rollouts", self._encode({"specs": specs}, "rollout input/metadata"))
        return [Rollout.from_dict(r) for r in data]

    async def _dequeue(self, worker_id: str, limit: int) -> list[tuple[Rollout, Attempt]]:
        payload = self._encode({"worker_id": worker_id, "limit": limit}, "dequeue")
        data = await self._call("POST", "/v1/dequeue", payload)
        return [(Rollout.from_dict(r), Attempt.from_dict(a)) for r, a in data]

    async def _finish_attempt(self, attempt_id: str, ending: Ending) -> Rollout:
        # splice the already-encoded output in rather than encoding it twice
        body = {"status": ending.status.value, "reward": ending.reward, "error": ending.error}
        payload = self._encode(body, "finish_attempt")[:-1] + b',"output":' + (ending.output or b"null") + b"}"
        data = await self._call("POST", f"/v1/attempts/{_q(attempt_id)}/finish", payload)
        return Rollout.from_dict(data)

    async def heartbeat(self, attempt_id: str) -> None:
        await self._call("POST", f"/v1/attempts/{_q(attempt_id)}/heartbeat", b"{}")

    async def requeue_stale(self, now: float | None = None) -> list[str]:
        now = None if now is None else validate_number(now, "now")
        return list(await self._call("POST", "/v1/requeue_stale", self._encode({"now": now}, "requeue_stale")))

    async def cancel_rollout(self, rollout_id: str) -> Rollout:
        return Rollout.from_dict(await self._call("POST", f"/v1/rollouts/{_q(rollout_id)}/cancel", b"{}"))

    async def get_rollout(self, rollout_id: str) -> Rollout:
        return Rollout.from_dict(await self._call("GET", f"/v1/rollouts/{_q(rollout_id)}"))

    async def _list_rollouts(
        self, status: RolloutStatus | None, mode: Mode | None, rollout_ids: list[str] | None, limit: int | None
    ) -> list[Rollout]:
        body = {"status": status, "mode": mode, "rollout_ids": rollout_ids, "limit": limit}
        data = await self._call("POST", "/v1/rollouts/list", self._encode(body, "list_rollouts"))
        return [Rollout.from_dict(r) for r in data]

    async def query_rollouts(self, query: RolloutQuery) -> RolloutPage:
        body = query.checked().to_dict()
        data = await self._call("POST", "/v1/rollouts/query", self._encode(body, "query_rollouts"))
        return RolloutPage.from_dict(data)

    async def count_rollouts(self, *, mode: Mode | None = None) -> dict[str, int]:
        body = {"mode": None if mode is None else Mode(mode).value}
        return dict(await self._call("POST", "/v1/rollouts/count", self._encode(body, "count_rollouts")))

    async def usage_by_version(self) -> dict[int, VersionUsage]:
        return usage_of(await self._call("GET", "/v1/rollouts/usage"))

    async def get_attempts(self, rollout_id: str) -> list[Attempt]:
        data = await self._call("GET", f"/v1/rollouts/{_q(rollout_id)}/attempts")
        return [Attempt.from_dict(a) for a in data]

    async def wait_for_rollouts(
        self, rollout_ids: Sequence[str], timeout: float | None = None, poll_s: float = 0.05
    ) -> list[Rollout]:
        """Long-polls the server (which waits on its own store) in chunks until done or ``timeout``."""
        wanted = list(rollout_ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _WAIT_CHUNK_S if deadline is None else max(0.0, min(deadline - time.monotonic(), _WAIT_CHUNK_S))
            body = {"rollout_ids": wanted, "timeout": left, "poll_s": poll_s}
            data = await self._call("POST", "/v1/rollouts/wait", self._encode(body, "wait_for_rollouts"))
            done = [Rollout.from_dict(r) for r in data]
            if len(done) == len(wanted) or (deadline is not None and time.monotonic() >= deadline):
                return done

    # -- spans --------------------------------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        spans = _checked(spans, validate_span)
        if not spans:
            return []
        try:
            payload = _json.dumps({"spans": spans})
        except TypeError as exc:
            for span in spans:  # name the culprit the way the other backends do
                try:
                    _json.dumps(span.attributes)
                except TypeError as inner:
                    raise InvalidInput(f"span {span.name!r} attributes: {inner}") from None
            raise InvalidInput(f"span batch: {exc}") from None
        return list(await self._call("POST", "/v1/spans", payload))

    async def import_rollout(self, item: ImportedRollout) -> ImportResult:
        spans = validate_import(item)
        wire = item.to_dict()
        wire["spans"] = [s.to_dict() for s in spans]
        data = await self._call("POST", "/v1/imports", self._encode({"rollout": wire}, "imported rollout"))
        return ImportResult(**data)

    async def get_spans(self, attempt_id: str, *, since: int = 0) -> list[Span]:
        since = validate_int(since, "since")
        data = await self._call("GET", f"/v1/attempts/{_q(attempt_id)}/spans", params={"since": str(since)})
        return [Span.from_dict(s) for s in data]

    # -- resources ----------------------------------------------------------------------------------------

    async def add_resources(
        self, *, llm: LLMEndpoint | None = None, prompts: dict[str, PromptTemplate] | None = None
    ) -> Resources:
        payload = self._encode({"llm": llm, "prompts": prompts}, "resources")
        return Resources.from_dict(await self._call("POST", "/v1/resources", payload))

    async def get_resources(self, version: int | None = None) -> Resources | None:
        if version is not None:
            validate_int(version, "version")
        path = "/v1/resources" if version is None else f"/v1/resources/{_q(str(version))}"
        data = await self._call("GET", path)
        return None if data is None else Resources.from_dict(data)

    # -- memory -------------------------------------------------------------------------------------------

    async def harvest(self, rollout_ids: Sequence[str] | None = None) -> list[Harvested]:
        body = {"rollout_ids": None if rollout_ids is None else list(rollout_ids)}
        data = await self._call("POST", "/v1/harvest", self._encode(body, "harvest"))
        return [Harvested.from_dict(h) for h in data]

    async def health(self) -> dict[str, Any]:
        """The server's ``/v1/health`` answer; raises ``StoreUnavailable`` if nothing answers."""
        return dict(await self._call("GET", "/v1/health"))

    async def close(self) -> None:
        self._closed = True
        self._pool.close()
