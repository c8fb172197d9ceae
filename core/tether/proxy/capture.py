"""Turn a backend's ``ChatResult`` into the OpenAI response a client gets and the ``llm`` span the store gets.

The span is ``tether.spans.LLM_CALL`` with ``tether.spans.ProxyLLMAttributes``: the schema
``tether.training.signal.transitions`` reads. A call the backend failed gets a ``tether.spans.LLM_CALL_FAILED``
span instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import orjson

from tether import spans
from tether.models.base import BackendError, ChatRequest, ChatResult
from tether.proxy.system_messages import Replacement
from tether.proxy.system_messages import mark as mark_replaced
from tether.types import Span, SpanKind

_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})


def completion_json(result: ChatResult, completion_id: str, want_logprobs: bool) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` object for ``result``. ``BackendError`` if the result is malformed."""
    if not isinstance(result, ChatResult):
        raise BackendError(f"backend returned {type(result).__name__}, not a ChatResult")
    if not result.choices:
        raise BackendError("backend returned no choices")
    choices = []
    completion_tokens = 0
    for index, choice in enumerate(result.choices):
        message = choice.message
        if not isinstance(message, dict) or message.get("role", "assistant") != "assistant":
            raise BackendError(f"backend choice {index} is not an assistant message: {message!r}")
        if "role" not in message or "content" not in message:
            message = {"role": "assistant", "content": None, **message}
        finish = choice.finish_reason if choice.finish_reason in _FINISH_REASONS else "stop"
        out: dict[str, Any] = {"index": index, "message": message, "finish_reason": finish, "logprobs": None}
        if want_logprobs and choice.logprobs is not None:
            ids = choice.response_token_ids or []
            out["logprobs"] = {
                "content": [
                    {
                        "token": f"token_id:{ids[i]}" if i < len(ids) else "",
                        "logprob": lp,
                        "bytes": None,
                        "top_logprobs": [],
                    }
                    for i, lp in enumerate(choice.logprobs)
                ]
            }
        if choice.response_token_ids is not None:
            completion_tokens += len(choice.response_token_ids)
        choices.append(out)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": result.model,
        "choices": choices,
        "usage": _usage(result, completion_tokens),
    }


def _usage(result: ChatResult, completion_tokens: int) -> dict[str, int]:
    usage = dict(result.usage) if result.usage else {}
    if "prompt_tokens" not in usage:
        usage["prompt_tokens"] = len(result.prompt_token_ids or ())
    if "completion_tokens" not in usage:
        usage["completion_tokens"] = completion_tokens
    if "total_tokens" not in usage:
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage


def request_params(request: ChatRequest, stream: bool) -> spans.RequestParams:
    """The sampling parameters a call's span records: what the backend was asked (after the attempt's
    overrides). Taken when the call is answered, so that its span, built later, holds no other part of it."""
    return {
        "model": request.model,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_tokens": request.max_tokens,
        "n": request.n,
        "stop": request.stop,
        "seed": request.seed,
        "stream": stream,
    }


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """A call of an open attempt, as each of its spans names it."""

    rollout_id: str
    attempt_id: str
    agent_name: str | None
    call_id: str
    raw_request: bytes  # the request as the backend was asked (a Responses API call's chat translation)
    start_time: float

    def span(self, name: str, attributes: dict[str, Any], end_time: float) -> Span:
        return Span(
            rollout_id=self.rollout_id,
            attempt_id=self.attempt_id,
            kind=SpanKind.LLM,
            name=name,
            agent_name=self.agent_name,
            attributes=attributes,
            start_time=self.start_time,
            end_time=end_time,
        )


def llm_span(
    call: RecordedCall,
    *,
    params: spans.RequestParams,
    result: ChatResult,
    response_payload: bytes,
    latency_ms: float,
) -> Span:
    """The ``llm`` span of one call. Messages are parsed again from the raw request and response bytes, so the
    span shares no object with the client, the backend or the response."""
    sent = orjson.loads(call.raw_request)
    answered = orjson.loads(response_payload)
    # annotated literals: mypy checks them against the schema, at no run-time cost on the hot path
    choices: list[spans.ProxyChoice] = [
        {
            "message": out["message"],
            "finish_reason": out["finish_reason"],
            "response_token_ids": None if c.response_token_ids is None else list(c.response_token_ids),
            "logprobs": None if c.logprobs is None else list(c.logprobs),
        }
        for c, out in zip(result.choices, answered["choices"], strict=True)
    ]
    attributes: spans.ProxyLLMAttributes = {
        "call_id": call.call_id,
        "request": {
            "messages": sent["messages"],
            "tools": sent.get("tools"),
            "params": params,
        },
        "prompt_token_ids": None if result.prompt_token_ids is None else list(result.prompt_token_ids),
        "choices": choices,
        "usage": answered["usage"],
        "model": result.model,
        "latency_ms": latency_ms,
        "token_ids_available": result.token_ids_available,
        "weights_version": result.weights_version,
    }
    # (a TypedDict is a plain dict at run time)
    return call.span(spans.LLM_CALL, cast("dict[str, Any]", attributes), call.start_time + latency_ms / 1000.0)


def failed_call_span(call: RecordedCall, error: str, status: int, raw_request: bytes | None = None) -> Span:
    """The ``LLM_CALL_FAILED`` span of a call the model backend failed (or the proxy refused): what was asked
    (``raw_request`` in place of the call's own, when given) and what the agent was answered."""
    sent = orjson.loads(raw_request if raw_request is not None else call.raw_request)
    attributes = {
        "call_id": call.call_id,
        "request": {"messages": sent.get("messages"), "tools": sent.get("tools")},
        spans.ERROR: error,
        "status": status,
    }
    return call.span(spans.LLM_CALL_FAILED, attributes, time.time())


def call_span(
    call: RecordedCall, policy: str | None, replaced: tuple[Replacement, list[int]] | None, **fields: Any
) -> Span:
    """The ``llm`` span of an answered call (``llm_span``'s ``fields``), with its policy and replaced system
    message marked."""
    span = llm_span(call, **fields)
    if policy is not None:
        span.attributes[spans.POLICY] = policy
    if replaced is not None:
        mark_replaced(span, *replaced)
    return span


def span_size(raw: bytes, payload: bytes, result: ChatResult) -> int:
    """About how many bytes of JSON a call's span takes: its request and answer, and its token ids."""
    ids = len(result.prompt_token_ids or ())
    for choice in result.choices:
        ids += len(choice.response_token_ids or ()) * 2  # ids and logprobs
    return len(raw) + len(payload) + 8 * ids
