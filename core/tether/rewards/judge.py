"""``tether.Judge``: a judge model scores a task's group of rollouts together, from what tether captured.

The group's transcripts (``tether.rewards.transcript``) go to the judge in one request (``judge_prompt``), in an
order that depends only on their content; its reply gives each rollout a score in [0, 1] and a one-line reason.
The request asks for the reply's JSON schema as ``response_format``; an endpoint that refuses that (HTTP 400)
is asked again without it, and the JSON is read from the reply's text. A reply that is not valid scores is asked
again (``retries``), then the group fails with a ``GroupRewardError`` naming the judge and showing its reply.

The judge's calls go straight to its own model (never through the proxy): they are never transitions and never
trained. Each rollout's reward span records its score, reason, the judge's model, the prompt's version and the
call's tokens; judgements are cached by content (``tether.rewards.cache``) and made at temperature 0.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

from tether.models.base import BackendError, BadRequest, ChatRequest, ModelBackend
from tether.rewards import judge_prompt
from tether.rewards.base import Group, GroupReward, GroupRewardError, Score, Verdict
from tether.rewards.cache import JudgeCache, cache_key
from tether.rewards.transcript import clip, shared_of, transcript

_REPLY_CHARS = 800


class Judge(GroupReward):
    """A judge model as ``reward=`` (see the module docstring).

    ``model``: any ``model=`` string tether takes — an OpenAI-compatible URL (``api_key=`` or
    ``$OPENAI_API_KEY``, ``model_name=`` the model to ask for there), ``"smollm2"``, ``"hf:<path>"``,
    ``"embedded"``, ``"vllm:<model>"`` — or a ``ModelBackend``. ``rubric``: what a good rollout is, in the user's
    words (default: did the agent achieve the user's goal correctly and efficiently). ``retries``: how many
    more times a reply that is not valid scores is asked again. ``structured=False`` never sends the schema.
    """

    name = "judge"

    def __init__(
        self,
        model: str | ModelBackend,
        rubric: str | None = None,
        *,
        api_key: str | None = None,
        model_name: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        retries: int = 2,
        structured: bool = True,
    ) -> None:
        if not isinstance(model, str | ModelBackend) or (isinstance(model, str) and not model.strip()):
            raise TypeError(
                'Judge(model=...) takes a model= string (an OpenAI-compatible URL such as "https://api.openai.com'
                f'/v1", "smollm2", "hf:<path>", "embedded") or a ModelBackend, got {model!r}'
            )
        if rubric is not None and (not isinstance(rubric, str) or not rubric.strip()):
            raise ValueError(f"Judge(rubric=...) takes the rubric's text, got {rubric!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"Judge(retries=...) must be an int >= 0, got {retries!r}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"Judge(max_tokens=...) must be an int >= 1, got {max_tokens!r}")
        self.model = model
        self.rubric = rubric
        self.api_key = api_key
        self.model_name = model_name
        self.temperature = float(temperature)
        self.max_tokens = max_tokens
        self.retries = retries
        self.structured = structured
        self._backend: ModelBackend | None = None
        self._owned = False
        self._schema_refused = False
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._caches: dict[Path | None, JudgeCache] = {}

    def __repr__(self) -> str:
        model = self.model if isinstance(self.model, str) else type(self.model).__name__
        named = f", model_name={self.model_name!r}" if self.model_name else ""
        return f"Judge(model={model!r}{named})"

    def __getstate__(self) -> dict[str, Any]:  # a started backend and its lock stay in this process
        state = dict(self.__dict__)
        state.update(_backend=None, _owned=False, _lock=None, _lock_loop=None, _caches={})
        return state

    def _guard(self) -> asyncio.Lock:
        """The lock of starting and closing, one per event loop (``dev`` and ``fit`` each run their own)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    @property
    def url(self) -> str | None:
        """The judge's OpenAI-compatible URL, None for a local model."""
        if isinstance(self.model, str) and self.model.strip().startswith(("http://", "https://")):
            return self.model.strip()
        return None

    # -- lifecycle ------------------------------------------------------------------------------------------

    def _open(self) -> tuple[ModelBackend, bool]:
        if isinstance(self.model, ModelBackend):
            return self.model, False
        url = self.url
        if url is not None:
            from tether.models.remote import RemoteBackend

            key = self.api_key or os.environ.get("OPENAI_API_KEY")
            return RemoteBackend(url, api_key=key, model=self.model_name), True
        from tether.models import open_backend

        return open_backend(self.model), True

    async def start(self) -> None:
        async with self._guard():
            if self._backend is None:
                backend, owned = self._open()
                await backend.start()
                self._backend, self._owned = backend, owned

    async def close(self) -> None:
        async with self._guard():
            backend, owned, self._backend = self._backend, self._owned, None
            if backend is not None and owned:
                await backend.close()

    async def problem(self) -> str | None:
        url = self.url
        if url is None:
            if isinstance(self.model, ModelBackend):
                return None
            try:
                from tether.models import open_backend

                open_backend(self.model)  # (not started: only the model= string and its extras are checked)
            except (ValueError, ImportError) as exc:
                return f"{self}: {exc}"
            return None
        return await _reachable(self, url, self.api_key or os.environ.get("OPENAI_API_KEY"))

    # -- scoring --------------------------------------------------------------------------------------------

    async def score_group(self, group: Group) -> Verdict:
        await self.start()
        shared = shared_of(group.task, group.members)
        texts = [transcript(m, shared) for m in group.members]
        # the judge sees the transcripts in an order set by their content alone: a rerun asks the same question
        order = sorted(range(len(texts)), key=lambda i: (hashlib.sha256(texts[i].encode()).hexdigest(), i))
        names = judge_prompt.ids(len(texts))
        prompt = judge_prompt.messages(self.rubric, shared, [texts[i] for i in order])
        key = cache_key(
            {
                "judge": repr(self),
                "version": judge_prompt.PROMPT_VERSION,
                "temperature": self.temperature,
                "messages": prompt,
            }
        )
        cache = self._caches.setdefault(group.cache_dir, JudgeCache(group.cache_dir))
        cached = cache.get(key)
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        calls = 0
        if isinstance(cached, dict) and isinstance(cached.get("scores"), dict):
            found = {name: (float(v[0]), str(v[1])) for name, v in cached["scores"].items()}
            usage = {k: int(cached.get("usage", {}).get(k, 0)) for k in usage}
        else:
            found, usage, calls = await self._ask(prompt, names)
            cache.put(key, {"scores": {n: list(v) for n, v in found.items()}, "usage": usage})
        scores: list[Score] = [Score(0.0)] * len(texts)
        for name, index in zip(names, order, strict=True):
            value, reason = found[name]
            details = {
                "judge.model": repr(self),
                "judge.prompt_version": judge_prompt.PROMPT_VERSION,
                "judge.id": name,
                "judge.group_size": len(texts),
                "judge.prompt_tokens": usage["prompt_tokens"],
                "judge.completion_tokens": usage["completion_tokens"],
                "judge.cached": cached is not None,
                "judge.key": key[:16],
            }
            scores[index] = Score(value, reason, details)
        metrics = {
            "judge/calls": float(calls),
            "judge/cache_hits": float(cached is not None),
            "judge/prompt_tokens": float(usage["prompt_tokens"] if calls else 0),
            "judge/completion_tokens": float(usage["completion_tokens"] if calls else 0),
        }
        return Verdict(scores, metrics)

    async def _ask(
        self, prompt: list[dict[str, Any]], names: list[str]
    ) -> tuple[dict[str, tuple[float, str]], dict[str, int], int]:
        """Ask the judge until its reply parses (``retries`` more times); the scores, tokens spent and calls."""
        assert self._backend is not None
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        reply, why, calls = None, "", 0
        for _ in range(self.retries + 1):
            structured = self.structured and not self._schema_refused
            request = ChatRequest(
                messages=prompt,
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                model=self.model_name,
                extra={"response_format": judge_prompt.SCHEMA} if structured else {},
            )
            try:
                calls += 1
                result = await self._backend.chat(request)
            except BadRequest as exc:
                if not structured:
                    raise GroupRewardError(f"{self} refused the request: {exc}") from None
                self._schema_refused = True  # the documented fallback: ask for JSON in the text instead
                request.extra = {}
                try:
                    calls += 1
                    result = await self._backend.chat(request)
                except (BackendError, BadRequest) as again:
                    raise GroupRewardError(f"{self} failed: {again}") from None
            except BackendError as exc:
                raise GroupRewardError(f"{self} failed: {exc}") from None
            for k in usage:
                usage[k] += int(result.usage.get(k, 0) or 0)
            reply = result.choices[0].message.get("content") if result.choices else None
            try:
                return judge_prompt.parse(reply, names), usage, calls
            except ValueError as exc:
                why = str(exc)
        raise GroupRewardError(
            f"{self} gave no valid scores in {self.retries + 1} tries ({why}); its last reply: "
            f"{clip(str(reply), _REPLY_CHARS)!r}. A judge must answer the JSON schema in tether.rewards."
            "judge_prompt (docs/judge.md): use a stronger judge model, or raise Judge(retries=...)"
        )


async def _reachable(judge: Judge, url: str, key: str | None) -> str | None:
    """None when the judge's server answers at ``url`` (``GET /models``), else why not, naming the URL."""
    import aiohttp

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(url.rstrip("/") + "/models", headers=headers) as response,
        ):
            status = response.status
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return (
            f"the judge {judge} is unreachable at {url} ({type(exc).__name__}: {exc}): start its server, or "
            "fix Judge(model=...)"
        )
    if status in (401, 403):
        return (
            f"the judge {judge} at {url} refused its API key (HTTP {status}): pass Judge(api_key=...) or set "
            "OPENAI_API_KEY"
        )
    return None
