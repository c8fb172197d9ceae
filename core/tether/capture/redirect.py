"""Per-request, context-scoped endpoint redirect for every client of the ``openai`` SDK.

While ``tether.capture.context.current_scope`` is set (the runner sets it around each rollout), each request that
an ``openai`` client builds is rewritten to the scope's ``base_url`` — the rollout's proxy URL — keeping the path
after the client's own base URL (``/chat/completions``, ``/responses``), and gets two headers (three when the
scope has a proxy token: ``X-Tether-Token``): ``X-Tether-Agent`` (the sub-agent making the call, from
``tether.capture.context.current_agent_name()``) and ``X-Tether-Call-Id`` (a fresh id per HTTP request, also left
in ``last_call_id`` for the caller). Outside any scope requests are untouched, and so are those
``tether.passthrough`` exempts (a judge's client or code region): they are only recorded, their answers read from
the SDK's ``_process_response``, wrapped while the redirect is installed.

The seam is the SDK's shared base client request builder, ``openai._base_client.BaseClient._build_request``:
every sync and async client (and Azure's, which calls it via ``super()``) goes through it on every request and
every retry, so clients built long before tether (at import time, with a hard-coded ``base_url``) are
redirected too, and because the scope is a context variable, concurrent rollouts in one event loop — and sync
calls made through ``asyncio.to_thread``, which copies the context — each reach their own URL. The request it
returns is an ``httpx`` (openai 2.x) or ``httpx2`` (openai 3.x) ``Request``; only attributes both share are
used. The seam is private: ``seam()`` checks it and raises ``SeamMissing`` naming the SDK version if a
release moves it.

``add_listener(fn)`` calls ``fn(json_body, scope, call_id)`` for each redirected request, in the caller's
context (the plain-function adapter reads tool results from it). Agent names go out percent-encoded
(``tether.capture.context.encode_agent_header``: a name with a newline is still a valid header).

The runner alone holds the redirect, around every rollout (``held()``: only when the ``openai`` SDK is
installed, decided once), the adapter's run and a user's ``run=`` alike; adapters never hold it (they name
sub-agents and capture), so nothing stays patched once no rollout runs. ``install()`` / ``uninstall()`` are
reference-counted through one ``tether.capture.patching.SharedPatch`` (for tests and benchmarks that drive a
rollout scope by hand, as the runner does); the last ``uninstall()`` restores the original function object
exactly. Importing this module does not import ``openai``: ``seam()``
does, when the redirect is first installed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any

from tether.capture import passthrough as passthrough_calls
from tether.capture.context import (
    AGENT_HEADER,
    CALL_ID_HEADER,
    TOKEN_HEADER,
    RolloutScope,
    current_agent_name,
    current_scope,
    encode_agent_header,
)
from tether.capture.patching import SeamMissing, SharedPatch
from tether.types import new_id

SEAM_MODULE = "openai._base_client"
SEAM_CLASS = "BaseClient"
SEAM_METHOD = "_build_request"
#: where the answers of passthrough requests are read (optional: without it only requests go unredirected)
RESPONSE_SEAM_CLASSES = ("SyncAPIClient", "AsyncAPIClient")
RESPONSE_SEAM_METHOD = "_process_response"

#: The call id of the last request redirected in this context (set by the sync or async caller's own context,
#: so a wrapper around ``create`` can read it after the call to join its capture with the proxy's span).
last_call_id: ContextVar[str | None] = ContextVar("tether_last_call_id", default=None)


#: Called as ``listener(json_body, scope, call_id)`` for each redirected request, in the caller's context.
RequestListener = Callable[[Any, RolloutScope, str], None]

log = logging.getLogger(__name__)


_original: Callable[..., Any] | None = None
_wrapper: Callable[..., Any] | None = None
_listeners_lock = threading.Lock()
_listeners: list[RequestListener] = []


def seam() -> tuple[type, Callable[..., Any]]:
    """The class and the current function at the seam; ``SeamMissing`` (naming the SDK version) if moved."""
    import openai

    version = getattr(openai, "__version__", "?")
    where = f"{SEAM_MODULE}.{SEAM_CLASS}.{SEAM_METHOD}"
    try:
        cls = getattr(importlib.import_module(SEAM_MODULE), SEAM_CLASS)
    except (ImportError, AttributeError) as exc:
        raise SeamMissing(
            f"openai {version}: {SEAM_MODULE}.{SEAM_CLASS} not found ({exc}); tether's endpoint redirect "
            f"(tether.capture.redirect) needs updating for this SDK release, or pin the openai version it supports"
        ) from exc
    func = cls.__dict__.get(SEAM_METHOD)
    if not callable(func):
        raise SeamMissing(
            f"openai {version}: {where} not found; tether's endpoint redirect (tether.capture.redirect) needs "
            f"updating for this SDK release, or pin the openai version it supports"
        )
    params = inspect.signature(func).parameters
    if list(params)[:2] != ["self", "options"] or "retries_taken" not in params:
        raise SeamMissing(
            f"openai {version}: {where} has an unexpected signature {inspect.signature(func)} (expected "
            f"(self, options, *, retries_taken=0)); tether's endpoint redirect needs updating for this release"
        )
    return cls, func


def _patch_seam() -> None:
    global _original, _wrapper
    cls, current = seam()
    _patch_responses()
    if _wrapper is not None and _is_ours(current, _wrapper):
        return  # still linked from an earlier install that someone patched over; holding it reactivates it
    if getattr(current, "__tether_redirect__", False):
        raise RuntimeError(
            f"{SEAM_CLASS}.{SEAM_METHOD} is already patched by another copy of tether.capture.redirect"
        )
    _original = current
    _wrapper = _make_wrapper(current)
    setattr(cls, SEAM_METHOD, _wrapper)


def _unpatch_seam(_: None) -> None:
    global _original, _wrapper
    cls, current = seam()
    if current is _wrapper:
        setattr(cls, SEAM_METHOD, _original)
        _original = _wrapper = None
    # else: something patched over ours and calls it; unheld, it passes requests through unchanged.
    _unpatch_responses()


#: (class, original, wrapper) of each ``_process_response`` wrapped to record passthrough answers
_response_patches: list[tuple[type, Callable[..., Any], Callable[..., Any]]] = []


def _patch_responses() -> None:
    """Wrap the sync and async clients' ``_process_response`` (where present) so that the answers of
    passthrough requests are recorded (``tether.passthrough``); they change nothing else."""
    module = importlib.import_module(SEAM_MODULE)
    for name in RESPONSE_SEAM_CLASSES:
        cls = getattr(module, name, None)
        original = cls.__dict__.get(RESPONSE_SEAM_METHOD) if isinstance(cls, type) else None
        if cls is None or not callable(original) or getattr(original, "__tether_passthrough__", False):
            continue
        wrapper = passthrough_calls.response_wrapper(original)
        setattr(cls, RESPONSE_SEAM_METHOD, wrapper)
        _response_patches.append((cls, original, wrapper))


def _unpatch_responses() -> None:
    while _response_patches:
        cls, original, wrapper = _response_patches.pop()
        if cls.__dict__.get(RESPONSE_SEAM_METHOD) is wrapper:
            setattr(cls, RESPONSE_SEAM_METHOD, original)


_patch: SharedPatch[None] = SharedPatch("openai endpoint redirect", _patch_seam, _unpatch_seam)


def install() -> None:
    """Patch the seam (first call) or add a reference to the patch (later calls). Thread-safe."""
    _patch.acquire()


def uninstall() -> None:
    """Drop one reference; the last one restores the original function object. No-op when not installed."""
    _patch.release()


def is_installed() -> bool:
    return _patch.count > 0


def install_count() -> int:
    return _patch.count


def installed() -> AbstractContextManager[None]:
    """Hold the redirect for the duration of a ``with`` block."""
    return _patch.held()


@functools.cache
def sdk_installed() -> bool:
    """Whether the ``openai`` SDK can be imported (found without importing it; decided once per process)."""
    return importlib.util.find_spec("openai") is not None


def held() -> AbstractContextManager[None]:
    """Hold the redirect for a ``with`` block when the ``openai`` SDK is installed, else do nothing: the runner
    enters it around every rollout, whatever the adapter, since every framework's model client is an openai
    SDK client."""
    return installed() if sdk_installed() else contextlib.nullcontext()


def add_listener(listener: RequestListener) -> None:
    """Call ``listener`` with the JSON body of every redirected request (idempotent). Used to read what the
    proxy cannot know, such as tool results a plain function sends back to the model."""
    with _listeners_lock:
        if listener not in _listeners:
            _listeners.append(listener)


def remove_listener(listener: RequestListener) -> None:
    with _listeners_lock:
        if listener in _listeners:
            _listeners.remove(listener)


def _is_ours(current: Callable[..., Any], wrapper: Callable[..., Any]) -> bool:
    """True if ``wrapper`` is ``current`` or is reached from it through ``__wrapped__`` links."""
    seen = 0
    while current is not None and seen < 32:
        if current is wrapper:
            return True
        current = getattr(current, "__wrapped__", None)  # type: ignore[assignment]
        seen += 1
    return False


def _make_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _build_request(self: Any, options: Any, *args: Any, **kwargs: Any) -> Any:
        request = original(self, options, *args, **kwargs)
        scope = current_scope.get()
        if scope is None or not _patch.count:  # not held: a wrapper someone patched over passes requests through
            return request
        if passthrough_calls.exempt(self):  # a judge's client or region: its own endpoint, recorded for inspection
            passthrough_calls.note_request(options, request)
            return request
        call_id = redirect_request(self.base_url, request, scope)
        if call_id is not None and _listeners:
            _notify(options, scope, call_id)
        return request

    _build_request.__tether_redirect__ = True  # type: ignore[attr-defined]
    return _build_request


def _notify(options: Any, scope: RolloutScope, call_id: str) -> None:
    body = getattr(options, "json_data", None)
    for listener in tuple(_listeners):
        try:
            listener(body, scope, call_id)
        except Exception:  # a capture bug must not fail the agent's model call
            log.exception("tether.capture.redirect request listener %r failed", listener)


def redirect_request(client_base_url: Any, request: Any, scope: RolloutScope) -> str | None:
    """Point ``request`` (an httpx or httpx2 ``Request`` built against ``client_base_url``) at the scope's URL
    and add the tether headers; return the request's call id. A request to another origin than the client's
    base URL is left alone (None)."""
    url = request.url
    base_path = client_base_url.raw_path.split(b"?", 1)[0]
    if not base_path.endswith(b"/"):
        base_path += b"/"
    same_origin = (url.scheme, url.host, url.port) == (
        client_base_url.scheme,
        client_base_url.host,
        client_base_url.port,
    )
    if not same_origin or not url.raw_path.startswith(base_path):
        return None
    suffix = url.raw_path[len(base_path) :].decode("ascii")
    suffix = _strip_azure_deployment(suffix)

    old_netloc = url.netloc
    new_url = _parse_url(url.__class__, scope.base_url.rstrip("/") + "/" + suffix)
    request.url = new_url
    # One pass over the raw headers and one rebuild: httpx's per-key get/set re-decodes every header each time.
    raw = request.headers.raw
    present = {name.lower(): value for name, value in raw}
    new_raw = [(n, new_url.netloc if n.lower() == b"host" and v == old_netloc else v) for n, v in raw]
    if _AGENT_KEY not in present:
        agent = current_agent_name()
        if agent:
            new_raw.append((AGENT_HEADER.encode(), encode_agent_header(agent).encode("ascii")))
    supplied = present.get(_CALL_ID_KEY)  # a caller may pass its own id in extra_headers to join its spans
    call_id = supplied.decode("latin-1") if supplied is not None else new_id("call")
    if supplied is None:
        new_raw.append((CALL_ID_HEADER.encode(), call_id.encode("ascii")))
    if scope.token is not None:
        new_raw.append((TOKEN_HEADER.encode(), scope.token.encode("utf-8")))
    request.headers = request.headers.__class__(new_raw)
    last_call_id.set(call_id)
    return call_id


_AGENT_KEY = AGENT_HEADER.lower().encode()
_CALL_ID_KEY = CALL_ID_HEADER.lower().encode()


@functools.lru_cache(maxsize=1024)
def _parse_url(url_type: Any, url: str) -> Any:
    # URL objects are immutable in httpx and httpx2; a rollout's calls reuse a few, and parsing is the main cost.
    return url_type(url)


def _strip_azure_deployment(suffix: str) -> str:
    # Azure clients put "deployments/<model>/" in front of the OpenAI path; the proxy serves the plain path.
    if suffix.startswith("deployments/"):
        parts = suffix.split("/", 2)
        if len(parts) == 3:
            return parts[2]
    return suffix
