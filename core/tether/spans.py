"""The span schema: the names and attribute keys of every span tether captures, in one place.

Producers (the proxy, framework adapters, tracers, ``tether.emit_reward``) and consumers (transitions, the
dev report, APO's traces) use these constants, never string literals, so that a key is spelled once. Three
layouts exist:

- **The proxy's LLM span** (kind ``llm``, name ``LLM_CALL``): one per model call answered by the proxy, the
  source of truth for training. Attributes are nested, not dotted (``ProxyLLMAttributes``): the request as
  sent, the choices with the token ids and logprobs the backend produced, usage, model, latency, and the
  version of the weights that sampled them (``WEIGHTS_VERSION``; None when the backend does not know it).
  Consumers read it through ``proxy_call(span)``, one reader of the nested keys, which gives a ``ProxyCall``
  (None for any other span, or a malformed one).
- **An adapter's LLM span** (kind ``llm``, any other name): a framework's own view of a call, flat dotted
  keys (``REQUEST_MESSAGES``, ``REQUEST_MODEL``, ``REQUEST_TOOLS``, ``RESPONSE``, ``USAGE``, ``ERROR``), for
  inspection; it names no transition (a call's sub-agent is the proxy span's, from the request header).
- **The proxy's failed-call span** (kind ``llm``, name ``LLM_CALL_FAILED``): a call the model backend
  failed, with the error the agent was answered; it says why a rollout has no transitions.
- **A passthrough call** (kind ``llm``, name ``PASSTHROUGH_CALL``): a judge's call that kept its own
  endpoint (``tether.passthrough``), for inspection only.
- **Tool spans** (kind ``tool``): ``TOOL_NAME``, ``TOOL_ARGUMENTS``, ``TOOL_CALL_ID``, and ``TOOL_RESULT`` or
  ``TOOL_ERROR`` (some adapters add ``TOOL_OUTPUT``, ``TOOL_FROM_CACHE``, ``LLM_CALL_ID``). **Reward spans**
  (kind ``reward``): ``REWARD_VALUE``, and ``REWARD_TARGET`` (a sub-agent or policy) and ``REWARD_FINAL``
  (a ``reward=`` mapping's value, recorded after the run) where they apply.

The sub-agent that made a call is the span's ``agent_name`` field, not an attribute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from tether.types import Span, SpanKind

# -- span names -------------------------------------------------------------------------------------------

#: the proxy's span of one model call (kind ``llm``)
LLM_CALL = "chat.completions"
#: the proxy's span of a call the model backend failed (kind ``llm``): ``call_id``, ``request`` (messages,
#: tools), ``ERROR`` and ``status`` (the HTTP status the agent got). Never a transition.
LLM_CALL_FAILED = "chat.completions.failed"
#: a model call that kept its own endpoint inside a rollout (``tether.passthrough``: a judge), recorded for
#: inspection (kind ``llm``): ``PASSTHROUGH`` true, ``url``, ``status``, ``request`` and ``response`` bodies.
#: Never a transition, never trained.
PASSTHROUGH_CALL = "passthrough"
#: a reward emitted by agent code (kind ``reward``), unless the agent names it otherwise
REWARD = "reward"
#: one APO candidate in a search's history record (kind ``other``)
APO_CANDIDATE = "apo.candidate"

# -- adapter LLM spans (flat keys) ------------------------------------------------------------------------

REQUEST_MESSAGES = "request.messages"
REQUEST_MODEL = "request.model"
REQUEST_TOOLS = "request.tools"
RESPONSE = "response"  # the assistant message, OpenAI chat format
USAGE = "usage"  # token counts as the framework reports them
ERROR = "error"  # why the call failed
PASSTHROUGH = "passthrough"  # True on a ``PASSTHROUGH_CALL`` span: not the policy's call
#: the proxy's id of the call (the ``call_id`` of its ``LLM_CALL`` span), where the adapter knows it
CALL_ID = "call_id"

# -- tool spans -------------------------------------------------------------------------------------------

TOOL_NAME = "tool.name"
TOOL_ARGUMENTS = "tool.arguments"
TOOL_RESULT = "tool.result"
TOOL_ERROR = "tool.error"
TOOL_CALL_ID = "tool.call_id"
TOOL_PARAMETERS = "tool.parameters"  # the tool's JSON schema, where the framework gives it
TOOL_OUTPUT = "tool.output"  # with ``TOOL_ERROR``: what the model was told instead of a result
TOOL_FROM_CACHE = "tool.from_cache"  # True when the framework answered from its tool cache
#: the proxy call id of the request that carried the tool's result back to the model
LLM_CALL_ID = "llm.call_id"

# -- reward spans -----------------------------------------------------------------------------------------

REWARD_VALUE = "reward.value"
#: the sub-agent or policy a reward is for (``tether.emit_reward(value, agent=...)``, or a key of the mapping a
#: ``reward=`` function returned); absent: the rollout's (the latest call before it, under ``credit="per_call"``)
REWARD_TARGET = "reward.target"
#: True on the reward spans the runner records for a ``reward=`` function's mapping: a target's final reward,
#: not a reward emitted during the run
REWARD_FINAL = "reward.final"

# -- rollout metadata keys --------------------------------------------------------------------------------

#: metadata of a rollout that holds an algorithm's records (claimed by the algorithm, never run)
RECORD_METADATA = "tether.record"
#: metadata of a rollout stored by an older tether: the sub-agent names its wrapped agent optimized
#: (``optimize=``), sorted; absent when every sub-agent trained (``POLICIES_METADATA`` replaces it)
OPTIMIZE_METADATA = "tether.optimize"
#: metadata of a rollout: its wrapped agent's policy map (``PolicyMap.to_metadata``), from which the
#: dashboard rebuilds each call's policy and ``trainable`` flag as training built them
POLICIES_METADATA = "tether.policies"
#: metadata of a rollout: the credit rule its run assigns advantages with
# (``tether.training.signal.credit.Credit``)
CREDIT_METADATA = "tether.credit"
#: metadata of a rollout: its seed (an int) when its run is seeded (``Trainer(seed=...)``): each attempt's and
#: call's sampling seed derives from it (``tether._seeds``)
SEED_METADATA = "tether.seed"
#: metadata of a rollout: the key of its group (its task, resources version and batch), by which a group reward
#: (``tether.Judge``, ``tether.MajorityVote``) scores the rollouts of a group together
GROUP_METADATA = "tether.group"
#: on a group reward's reward span: the one-line reason it gave the rollout's score
REWARD_REASON = "reward.reason"
#: on a group reward's reward span: the weight and the target of its part of ``reward=`` (absent: 1, the rollout)
REWARD_WEIGHT = "reward.weight"
REWARD_PART_OF = "reward.part_of"
#: metadata of a rollout imported from traces (``tether import``, the store's ``/v1/traces``): where from; and,
#: set True, an attribute of each span it holds
IMPORTED = "tether.imported"


# -- the proxy's LLM span -------------------------------------------------------------------------------------

#: the key of the weights version in the proxy's LLM span (``ProxyLLMAttributes``): the backend's
#: ``weights_version`` when it sampled the call, None for backends that do not know it (remote APIs)
WEIGHTS_VERSION = "weights_version"
#: on the proxy's ``llm`` span: the policy that served the call (``tether.policies``)
POLICY = "tether.policy"
#: on the proxy's ``llm`` span of a call whose system message the proxy replaced
# (``tether.proxy.system_messages``):
#: ``prompt`` (the candidate's resources name), ``messages`` (the indices replaced), ``original`` (the text the
#: agent sent). The span's request messages are the ones the model saw.
SYSTEM_MESSAGE_REPLACED = "tether.system_message_replaced"


# -- the proxy's LLM span, typed --------------------------------------------------------------------------


class RequestParams(TypedDict):
    model: str | None
    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    n: int | None
    stop: Any
    seed: int | None
    stream: bool


class ProxyRequest(TypedDict):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    params: RequestParams


class ProxyChoice(TypedDict):
    message: dict[str, Any]
    finish_reason: str | None
    response_token_ids: list[int] | None
    logprobs: list[float] | None


class ProxyLLMAttributes(TypedDict):
    """The attributes of the proxy's ``LLM_CALL`` span."""

    call_id: str
    request: ProxyRequest
    prompt_token_ids: list[int] | None
    choices: list[ProxyChoice]
    usage: dict[str, int]
    model: str | None
    latency_ms: float
    token_ids_available: bool
    weights_version: int | None  # the key is ``WEIGHTS_VERSION``


def tool_attributes(
    name: str,
    arguments: Any,
    *,
    result: Any = None,
    error: str | None = None,
    call_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The attributes of a ``tool`` span: name, arguments, call id, and the result or the error."""
    attributes: dict[str, Any] = {TOOL_NAME: name, TOOL_ARGUMENTS: arguments}
    if call_id is not None:
        attributes[TOOL_CALL_ID] = call_id
    if error is not None:
        attributes[TOOL_ERROR] = error
    else:
        attributes[TOOL_RESULT] = result
    attributes.update(extra)
    return attributes


def reward_attributes(value: float, **extra: Any) -> dict[str, Any]:
    """The attributes of a ``reward`` span."""
    return {REWARD_VALUE: value, **extra}


def adapter_llm_attributes(
    messages: Any, *, model: str | None = None, tools: Any = None, **extra: Any
) -> dict[str, Any]:
    """The attributes of an adapter's own ``llm`` span of a call (flat keys)."""
    attributes: dict[str, Any] = {REQUEST_MESSAGES: messages}
    if model is not None:
        attributes[REQUEST_MODEL] = model
    if tools is not None:
        attributes[REQUEST_TOOLS] = tools
    attributes.update(extra)
    return attributes


def is_proxy_llm_span(span: Span) -> bool:
    """True for the proxy's span of an answered model call (the source of transitions), not an adapter's view,
    laid out as ``ProxyLLMAttributes`` says (a malformed one, from an import or an old store, is not: see
    ``proxy_llm_problem``)."""
    return (
        span.kind == SpanKind.LLM
        and span.name == LLM_CALL
        and "choices" in span.attributes
        and proxy_llm_problem(span) is None
    )


def proxy_llm_problem(span: Span) -> str | None:
    """What is wrong with the layout of a proxy ``llm`` span (``LLM_CALL``), or None when it is readable."""
    if span.kind != SpanKind.LLM or span.name != LLM_CALL:
        return None
    a = span.attributes
    request, choices = a.get("request"), a.get("choices")
    why = None
    if not isinstance(request, dict):
        why = f"'request' is {type(request).__name__}, not an object"
    elif not isinstance(request.get("messages") or [], list):
        why = "'request.messages' is not a list"
    elif not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        why = "'choices' is not a list of objects"
    elif not all(isinstance(c.get("message") or {}, dict) for c in choices):
        why = "a choice's 'message' is not an object"
    elif not all(isinstance(c.get(k) or [], list) for c in choices for k in ("response_token_ids", "logprobs")):
        why = "a choice's 'response_token_ids' or 'logprobs' is not a list"
    elif not isinstance(a.get("prompt_token_ids") or [], list) or not isinstance(a.get("usage") or {}, dict):
        why = "'prompt_token_ids' is not a list or 'usage' not an object"
    return None if why is None else f"span {span.span_id} ({LLM_CALL}) is malformed, so it is skipped: {why}"


# -- the proxy's LLM span, read ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProxyCall:
    """One proxy ``LLM_CALL`` span, read (``proxy_call``): what is missing is empty or None. The lists and
    dicts are the span's own (not copies)."""

    call_id: str | None
    messages: list[dict[str, Any]]  # the request's messages, as the model saw them
    tools: list[dict[str, Any]] | None
    params: dict[str, Any]  # the request's sampling parameters (``RequestParams``)
    choices: list[dict[str, Any]]  # ``ProxyChoice`` each
    prompt_token_ids: list[int] | None
    usage: dict[str, Any]
    model: str | None  # the model that answered (the request's is ``params["model"]``)
    latency_ms: float | None
    weights_version: int | None
    policy: str | None  # the policy that served the call (``POLICY``)

    @property
    def choice(self) -> dict[str, Any]:
        """The first choice (the one a transition trains on); ``{}`` when there is none."""
        return self.choices[0] if self.choices else {}

    @property
    def message(self) -> dict[str, Any]:
        """The first choice's assistant message; ``{}`` when there is none."""
        message = self.choice.get("message")
        return message if isinstance(message, dict) else {}

    @property
    def response_token_ids(self) -> list[int] | None:
        ids = self.choice.get("response_token_ids")
        return ids if isinstance(ids, list) else None

    @property
    def logprobs(self) -> list[float] | None:
        logprobs = self.choice.get("logprobs")
        return logprobs if isinstance(logprobs, list) else None

    @property
    def finish_reason(self) -> str | None:
        reason = self.choice.get("finish_reason")
        return reason if isinstance(reason, str) else None

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls of the first choice's message."""
        calls = self.message.get("tool_calls")
        return calls if isinstance(calls, list) else []

    def has_tool_call(self) -> bool:
        """Whether any choice asked for a tool."""
        return any((c.get("message") or {}).get("tool_calls") for c in self.choices)


def proxy_call(span: Span) -> ProxyCall | None:
    """The proxy's span of an answered model call, read; None for any other span and for a malformed one
    (``is_proxy_llm_span``)."""
    if not is_proxy_llm_span(span):
        return None
    a = span.attributes
    request = a["request"]  # a dict, and the rest of the layout readable: is_proxy_llm_span checked it
    params = request.get("params")
    call_id, model, latency = a.get("call_id"), a.get("model"), a.get("latency_ms")
    version, policy = a.get(WEIGHTS_VERSION), a.get(POLICY)
    return ProxyCall(
        call_id=call_id if isinstance(call_id, str) else None,
        messages=request.get("messages") or [],
        tools=request.get("tools") or None,
        params=params if isinstance(params, dict) else {},
        choices=a["choices"],
        prompt_token_ids=a.get("prompt_token_ids"),
        usage=a.get("usage") or {},
        model=model if isinstance(model, str) else None,
        latency_ms=latency if isinstance(latency, int | float) and not isinstance(latency, bool) else None,
        weights_version=version if isinstance(version, int) and not isinstance(version, bool) else None,
        policy=policy if isinstance(policy, str) and policy else None,
    )
