"""Serving a local torch model: requests micro-batched on a worker thread, weights guarded for in-place updates.

``LocalBackend`` is the common part of the embedded and ``hf:`` backends. ``chat`` validates and tokenises
on the event loop, then queues the request; one worker thread takes everything queued (up to
``max_batch_rows`` sampled rows), samples it in one batched call, and resolves each request as soon as its
rows finish. Requests that arrive meanwhile form the next batch. Generation holds ``weights_lock``; a
trainer updates the weights in place inside ``with backend.policy() as model: ...`` and the next batch
uses them, no restart. Each request is sampled on its ``ChatRequest.policy``'s weights. The weights themselves
(policies, LoRA, checkpoints) are managed by ``tether.models.local._weights.LocalWeights``, its base. A call
whose prompt's token ids extend an earlier call's prompt and reply (a rollout's next turn) starts from that call's
KV instead of computing it again (``tether.models.local._kv_cache``; ``kv_cache=`` sets its byte budget, 0 turns
it off).
"""

from __future__ import annotations

import abc
import asyncio
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from tether.models._spec import usable_cores
from tether.models.base import BackendError, BadRequest, ChatRequest, ChatResult, Choice, ModelBackend
from tether.models.local._kv_cache import PrefixKV, parse_budget
from tether.models.local._sample_dtype import SamplingCopies, cpu_sample_dtype, say_once
from tether.models.local._sampling import Sample, SampleParams, generate, row_seed
from tether.models.local._weights import LocalWeights
from tether.policies import DEFAULT_POLICY

#: torch threads for the process (``torch.set_num_threads`` is process-wide). ``bench/embedded.py`` on 2 shared
#: cores, tiny preset (0.9M params), three runs under varying load: 1 thread sampled 1,500-5,500 tok/s at batch
#: 16 (350-770 at batch 1) and did a 32x128 update in 0.34-1.45 s; 2 threads were slower in every run (68-2,100
#: tok/s, 2.1-3.6 s): the OpenMP threads wait on each other when the other core is busy. So: 1.
DEFAULT_THREADS = 1


@dataclass(slots=True)
class _Job:
    prompt: list[int]
    params: list[SampleParams]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[Sample]]
    samples: dict[int, Sample] = field(default_factory=dict)
    weights_version: int | None = None  # the version that sampled the job (set under the weights lock)
    policy: str = DEFAULT_POLICY  # the policy whose weights sample it (resolved when queued)


def _post(job: _Job, result: Any = None, error: BaseException | None = None) -> None:
    try:
        job.loop.call_soon_threadsafe(_resolve, job.future, result, error)
    except RuntimeError:  # the caller's event loop is closed: nobody is waiting
        pass


def _resolve(future: asyncio.Future[Any], result: Any = None, error: BaseException | None = None) -> None:
    if future.done():  # the caller went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class LocalBackend(LocalWeights, ModelBackend):
    """A torch causal LM served in-process. Subclasses set ``model``/``tokenizer`` and say how to render
    a request into prompt ids and parse generated text into an assistant message; the weights are managed by
    ``LocalWeights`` (``tether.models.local._weights``).

    ``exact_logprobs = True`` recomputes a seeded sample's logprobs alone once it finishes, so they are the same
    bit for bit whatever shared its batch (one more forward pass a sample; GRPO does not need it)."""

    exact_logprobs: bool = False

    def __init__(
        self,
        *,
        threads: int | None = None,
        max_batch_rows: int = 64,
        default_max_tokens: int = 256,
        kv_cache: int | str | None = None,
    ) -> None:
        if threads is not None and not 1 <= threads <= usable_cores():
            raise ValueError(
                f"threads={threads!r}: threads is the number of torch CPU threads, an integer from 1 to "
                f"{usable_cores()} (the CPU cores this process may use)"
            )
        LocalWeights.__init__(self)
        #: a rollout's KV across its turns (``tether.models.local._kv_cache``), within ``kv_cache`` bytes (0: off)
        self.kv_cache = PrefixKV(parse_budget(kv_cache))
        #: bf16 copies the sampler runs while the float32 weights train (``choose_sample_dtype``); None: the model
        self.sampling_copies: SamplingCopies | None = None
        self.threads = threads or DEFAULT_THREADS
        self.max_batch_rows = max_batch_rows
        self.default_max_tokens = default_max_tokens
        #: batches run and rows sampled (for tests and metrics)
        self.batches = 0
        self.rows = 0
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._thread_guard = threading.Lock()
        torch.set_num_threads(self.threads)

    # -- what subclasses provide -------------------------------------------------------------------------
    @abc.abstractmethod
    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """Prompt token ids for a conversation (ending where the assistant's reply starts)."""

    @abc.abstractmethod
    def render_reply(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, reply: dict[str, Any]
    ) -> list[int]:
        """Token ids the model would generate for the assistant message ``reply`` after ``render(messages,
        tools)``: its body and end-of-turn marker (what SFT trains on when a call has no recorded ids)."""

    @abc.abstractmethod
    def parse(self, text: str) -> dict[str, Any]:
        """Generated text → OpenAI assistant message (never raises)."""

    @property
    @abc.abstractmethod
    def stop_token_ids(self) -> list[int]: ...

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 0) or self.tokenizer.model_max_length)

    @property
    def pad_token_id(self) -> int:
        """The id that pads update batches (masked out, so any id does when the tokenizer has none)."""
        pad = self.tokenizer.pad_token_id
        return int(pad) if pad is not None else 0

    @property
    def sample_dtype(self) -> torch.dtype:
        """The dtype the sampler computes in."""
        if self.sampling_copies is not None:
            return self.sampling_copies.dtype
        return next(self.model.parameters()).dtype

    def choose_sample_dtype(self, device: str, dtype: str | torch.dtype | None) -> None:
        """On a CPU, sample in ``dtype`` (None: ``tether.models.local._sample_dtype``'s rule) from a copy of the
        float32
        weights that train, and say which once; on CUDA the model samples in its own dtype."""
        if device.startswith("cuda"):
            return
        chosen, why = cpu_sample_dtype(sum(p.numel() for p in self.model.parameters()), dtype)
        held = next(self.model.parameters()).dtype
        self.sampling_copies = SamplingCopies(chosen) if chosen != held else None
        say_once(self.name, chosen, why)

    def kv_stats(self) -> dict[str, int]:
        """What the KV cache across a rollout's turns saved so far: rows looked up (``calls``), rows that started
        from an earlier call's KV (``hits``), prompt tokens taken from it (``reused_tokens``) of all prompt
        tokens looked up (``prompt_tokens``)."""
        return self.kv_cache.stats.as_dict()

    def decode(self, token_ids: list[int]) -> str:
        """The text of response token ids, exactly as ``chat`` returned it."""
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))

    # -- serving -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._ensure_worker()

    async def close(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._queue.put(None)
        await asyncio.get_running_loop().run_in_executor(None, thread.join)
        self._thread = None

    async def chat(self, request: ChatRequest) -> ChatResult:
        prompt, params = self._prepare(request)
        loop = asyncio.get_running_loop()
        job = _Job(prompt, params, loop, loop.create_future(), policy=self._route(request.policy))
        self._ensure_worker()
        self._queue.put(job)
        samples = await job.future
        choices = []
        for s in samples:
            message = self.parse(s.text)
            finish = "tool_calls" if message.get("tool_calls") and s.finish_reason == "stop" else s.finish_reason
            choices.append(Choice(message, finish, s.token_ids, s.logprobs))
        completion = sum(len(s.token_ids) for s in samples)
        return ChatResult(
            choices=choices,
            model=request.model or self.name,
            prompt_token_ids=prompt,
            weights_version=job.weights_version,
            usage={
                "prompt_tokens": len(prompt),
                "completion_tokens": completion,
                "total_tokens": len(prompt) + completion,
            },
        )

    def _route(self, policy: str | None) -> str:
        """The policy whose weights answer a request (``BadRequest`` for one this backend does not hold)."""
        if self.policies is not None:
            return self.policies.resolve(policy)
        if policy not in (None, DEFAULT_POLICY):
            raise BadRequest(
                f"this {self.name} backend holds one policy, not {policy!r}: the policies of "
                "optimize={policy: [sub-agents]} are declared by the Session (declare_policies)"
            )
        return DEFAULT_POLICY

    def _prepare(self, request: ChatRequest) -> tuple[list[int], list[SampleParams]]:
        if not isinstance(request.messages, list) or not request.messages:
            raise BadRequest("messages must be a non-empty list of chat messages")
        if not isinstance(request.n, int) or not 1 <= request.n <= self.max_batch_rows:
            raise BadRequest(f"n must be an integer from 1 to {self.max_batch_rows}, got {request.n!r}")
        if request.temperature is None or not 0 <= request.temperature <= 100:
            raise BadRequest(f"temperature must be between 0 and 100, got {request.temperature!r}")
        if request.top_p is None or not 0 < request.top_p <= 1:
            raise BadRequest(f"top_p must be in (0, 1], got {request.top_p!r}")
        stop = request.stop or []
        if isinstance(stop, str):
            stop = [stop]
        if not all(isinstance(s, str) and s for s in stop):
            raise BadRequest("stop must be a string or a list of non-empty strings")
        try:
            prompt = self.render(request.messages, request.tools)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadRequest(f"cannot render these messages/tools with the chat template: {exc}") from exc
        room = self.context_length - len(prompt)
        if room <= 0:
            raise BadRequest(
                f"the prompt is {len(prompt)} tokens but the model's context is {self.context_length}: "
                "shorten the conversation"
            )
        max_tokens = request.max_tokens
        if max_tokens is None:
            max_tokens = min(self.default_max_tokens, room)
        elif not isinstance(max_tokens, int) or max_tokens < 1:
            raise BadRequest(f"max_tokens must be a positive integer, got {max_tokens!r}")
        elif max_tokens > room:
            raise BadRequest(
                f"the prompt is {len(prompt)} tokens and max_tokens is {max_tokens}, over the model's context of "
                f"{self.context_length}: lower max_tokens to at most {room} or shorten the conversation"
            )
        params = [
            SampleParams(
                max_tokens,
                float(request.temperature),
                float(request.top_p),
                tuple(stop),
                row_seed(request.seed, j),
            )
            for j in range(request.n)
        ]
        return prompt, params

    def _ensure_worker(self) -> None:
        with self._thread_guard:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name=f"tether-{self.name}-sampler", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs, rows, stopping = [job], len(job.params), False
            while rows < self.max_batch_rows:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                jobs.append(more)
                rows += len(more.params)
            self._run(jobs)
            if stopping:
                return

    def _run(self, all_jobs: list[_Job]) -> None:
        """Sample the queued jobs, one batched call per policy on that policy's weights."""
        groups: dict[str, list[_Job]] = {}
        for job in all_jobs:
            groups.setdefault(job.policy, []).append(job)
        for policy, jobs in groups.items():
            self._run_group(policy, jobs)

    def _run_group(self, policy: str, jobs: list[_Job]) -> None:
        owners: list[tuple[_Job, int]] = [(job, j) for job in jobs for j in range(len(job.params))]

        def finished(i: int, sample: Sample) -> None:
            job, j = owners[i]
            job.samples[j] = sample
            if len(job.samples) == len(job.params):
                ordered = [job.samples[k] for k in range(len(job.params))]
                _post(job, ordered)

        try:
            with self.weights_lock, torch.inference_mode(), self.serving(policy) as model:
                version = self.weights_version_of(policy)
                if self.sampling_copies is not None and (self.lora is None or self.policies is None):
                    # (one adapter per policy on one base: sampled as they train, the copy would need each)
                    model = self.sampling_copies.get(model, policy, version)
                for job in jobs:
                    job.weights_version = version
                self.batches += 1
                self.rows += len(owners)
                generate(
                    model,
                    self.tokenizer,
                    [job.prompt for job, _ in owners],
                    [job.params[j] for job, j in owners],
                    stop_token_ids=self.stop_token_ids,
                    on_finish=finished,
                    rescore=self.exact_logprobs,
                    reuse=self.kv_cache.scoped((policy, version)) if self.kv_cache.budget else None,
                )
        except Exception as exc:  # a failed batch fails its requests, never the worker
            error = BackendError(f"{self.name} generation failed: {type(exc).__name__}: {exc}")
            for job in jobs:
                if len(job.samples) < len(job.params):
                    _post(job, None, error)
