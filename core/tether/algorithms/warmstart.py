"""``tether.WarmStart``: teach the student model the agent's job from a teacher before reinforcement learning.

A fresh or small model rarely earns any reward on a new agent, so GRPO has nothing to learn from. A warm
start fixes that: tether runs the wrapped agent against a **teacher** (any OpenAI-compatible URL, such as the
user's API model or a local vLLM, or a ``ModelBackend``), keeps the rollouts whose reward reaches
``min_reward``, and fine-tunes the student on the LLM calls those rollouts captured, tool calls included,
rendered through the student's own chat template (``tether.SFT`` underneath, so full weights, LoRA and one
set of weights per policy of ``wrap(optimize={...})`` all work).

The teacher's rollouts are kept in the run folder (``warmstart/teacher.db``): a resumed run reuses them and
asks the teacher only for the ones missing, so a paid API is not queried twice. A fresh ``model="embedded"``
(random weights, built in memory) first gets its tokenizer retrained on the teacher's traffic, so the agent's
prompts and tool schemas take few tokens. ``Trainer(algorithm=[tether.WarmStart(...), tether.GRPO(...)])``
runs it before GRPO in one run (``tether.algorithms.stages``).

The preflight probes the teacher once (``probe``): one short call must be answered within ``teacher_timeout_s``
(60 s), so a teacher that is unreachable, refuses the key or hangs stops the run at once, named, instead of after
every teacher rollout has failed or timed out. A teacher given as a local model string (``"embedded"``, ``hf:``) is
not probed: loading it is the check.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.algorithms.base import Algorithm
from tether.models.base import ModelBackend, RefitsTokenizer, RendersReplies, attach_lora
from tether.models.lora import LoRA
from tether.policies import PolicyMap
from tether.training.run.health import FitError
from tether.training.run.progress import rollouts_bar
from tether.training.run.result import FitResult
from tether.types import Mode, RolloutStatus, Task

if TYPE_CHECKING:
    from tether.training.engine.session import Session

#: what a ``RemoteBackend`` error says when the teacher did not answer the probe, or refused its key
_NO_ANSWER = ("cannot reach", "did not answer", " answered 401", " answered 403", " answered 407")
#: the fine-tuning's settings a warm start passes on to its ``tether.SFT`` as they are
_SFT_SETTINGS = "min_reward epochs lr batch_size micro_batch micro_batch_tokens pack share_prefix policies".split()
#: where the teacher's rollouts are kept, inside the run folder
TEACHER_STORE = Path("warmstart") / "teacher.db"


@dataclass
class WarmStart(Algorithm):
    """Run the agent ``rollouts`` times against ``teacher``, keep the rollouts with ``reward >= min_reward``,
    and fine-tune the student on their calls for ``epochs`` passes.

    ``teacher``: an OpenAI-compatible base URL (``"https://api.openai.com/v1"``, ``"http://localhost:8000/v1"``),
    any ``model=`` string, or a ``ModelBackend`` (left open: its owner closes it). The agent's requests go to it
    unchanged, with the trainer's ``sampling`` and ``temperature`` (None: the trainer's). ``rollouts``:
    teacher rollouts, drawn from the training tasks (cycled when there are fewer tasks). ``lr``, ``batch_size``,
    ``micro_batch``, ``micro_batch_tokens``, ``pack``, ``share_prefix``: the fine-tuning's (``tether.SFT``,
    warm-up then cosine decay; ``pack``: a rollout's calls that extend each other exactly train as one sequence;
    ``share_prefix``: a micro-batch's common prompt prefix is computed once).
    ``lora=tether.LoRA(...)``: train adapters instead of all the weights (give GRPO the same ``lora=`` when it
    follows). ``policies``: the policies of ``wrap(optimize={...})`` to train (None: all).
    ``refit_tokenizer``: retrain a fresh embedded model's tokenizer on the teacher's traffic first (a
    checkpoint's or a pretrained one is kept). ``teacher_timeout_s``: how long the preflight's one probe call to
    the teacher may take before the run stops naming it.
    """

    #: a finished warm start is not redone when its run resumes (``tether.algorithms.stages``)
    continues_on_resume = False

    teacher: str | ModelBackend
    rollouts: int = 64
    min_reward: float = 1.0
    epochs: int = 3
    lr: float = 1e-3
    batch_size: int = 16
    micro_batch: int = 16
    micro_batch_tokens: int | None = None
    pack: bool = True
    share_prefix: bool = True
    temperature: float | None = None
    lora: LoRA | None = None
    policies: Sequence[str] | None = None
    refit_tokenizer: bool = True
    teacher_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.teacher, str):
            if not self.teacher.strip():
                raise ValueError(
                    'WarmStart needs a teacher: an OpenAI-compatible URL such as "http://localhost:8000/v1"'
                )
        elif not isinstance(self.teacher, ModelBackend):
            raise TypeError(
                f"WarmStart(teacher=...) takes an OpenAI-compatible URL or a ModelBackend, got "
                f"{type(self.teacher).__name__}"
            )
        if isinstance(self.rollouts, bool) or not isinstance(self.rollouts, int) or self.rollouts < 1:
            raise ValueError(
                f"WarmStart needs rollouts >= 1 (teacher rollouts to learn from), got {self.rollouts!r}"
            )
        if isinstance(self.teacher, str):
            from tether.models import check_model

            check_model(self.teacher)  # a URL without a host, a bad option: refused now
        if not self.teacher_timeout_s > 0:
            raise ValueError(f"WarmStart(teacher_timeout_s=...) must be > 0 seconds, got {self.teacher_timeout_s}")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"WarmStart(temperature=...) must be >= 0 or None, got {self.temperature}")
        self._sft()  # the fine-tuning's own checks (epochs, lr, batch sizes), now rather than after the teacher

    # -- the algorithm contract ----------------------------------------------------------------------------

    def prepare_backend(self, backend: ModelBackend) -> None:
        """Before the student starts: attach the LoRA adapters, if any (as ``GRPO(lora=...)`` does)."""
        if self.lora is not None:
            attach_lora(backend, self.lora, "WarmStart", "model='embedded' or 'hf:<path>'")

    async def probe(self, session: Session) -> None:
        """One short call to the teacher, answered within ``teacher_timeout_s``, or a ``FitError`` naming it. Any
        answer shows the teacher is there, an error included (a 404 for a model this probe does not name: the
        agent's calls name theirs); no answer, no connection or a refused key (401/403) stops the run."""
        del session
        from tether.models import open_backend
        from tether.models.base import BackendError, BadRequest, ChatRequest

        given = self.teacher
        if isinstance(given, str) and not given.strip().startswith(("http://", "https://")):
            return  # a local model: loading it is the check
        teacher = open_backend(given.strip()) if isinstance(given, str) else given
        name = given.strip() if isinstance(given, str) else f"{type(given).__name__} {getattr(given, 'name', '')}"
        call = ChatRequest(messages=[{"role": "user", "content": "Reply with OK."}], max_tokens=1, temperature=0.0)
        try:
            async with asyncio.timeout(self.teacher_timeout_s):
                await teacher.start()
                await teacher.chat(call)
        except TimeoutError:
            raise FitError(
                f"preflight: the WarmStart teacher {name} did not answer a one-token call within "
                f"{self.teacher_timeout_s:g} s (WarmStart(teacher_timeout_s=)): check that it is up and not "
                "overloaded, or give another teacher"
            ) from None
        except BadRequest:
            return  # it answered
        except BackendError as exc:
            if not any(sign in str(exc) for sign in _NO_ANSWER):
                return  # it answered (a 404 for a model this probe does not name, a scripted server's 500)
            raise FitError(
                f"preflight: the WarmStart teacher {name} failed a one-token call: {exc}. Check its URL and API "
                "key (the agent's client sends its own key; a RemoteBackend(api_key=...) teacher its own)"
            ) from None
        finally:
            if isinstance(given, str):
                await teacher.close()

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult:
        """Collect the teacher's rollouts (those not already kept), then fine-tune the student on the good ones."""
        backend = session.backend
        if not isinstance(backend, RendersReplies):
            raise ValueError(
                "WarmStart fine-tunes a model tether holds in torch: use model='embedded' or model='hf:<path>' "
                f"(the {type(backend).__name__} cannot be fine-tuned on demonstrations: it is no "
                "tether.models.base.RendersReplies)"
            )
        if not train:
            raise ValueError("WarmStart needs training tasks: the teacher runs the agent on them")
        run = session.require_run("WarmStart")
        path = run.path / TEACHER_STORE
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{path}"
        record = await self._demonstrate(session, train, url)
        run.log(record)
        if record["teacher_rollouts"] == 0:
            raise ValueError(
                f"WarmStart: none of the teacher's {record['asked']} rollouts finished "
                f"({record['teacher_failed']} failed{': ' + record['problem'] if record['problem'] else ''}): "
                "nothing to learn from. Check the teacher and the agent with Trainer(model=<teacher>).dev(...); "
                "min_reward plays no part yet"
            )
        if record["kept"] == 0:
            raise ValueError(
                f"WarmStart: none of the teacher's {record['teacher_rollouts']} finished rollouts reached "
                f"min_reward={self.min_reward} (their mean reward was {record['teacher_reward']:.3f}; "
                f"{record['teacher_failed']} failed{': ' + record['problem'] if record['problem'] else ''}): "
                "lower "
                "min_reward, check the agent's reward against the teacher with Trainer(model=<teacher>).dev(...), "
                "or use a stronger teacher"
            )
        if self.refit_tokenizer:
            await self._refit(backend, url)
        result: FitResult = await self._sft(url).fit(session, train, val)
        result.history.insert(0, record)
        return result

    # -- the teacher's rollouts ----------------------------------------------------------------------------

    async def _demonstrate(self, session: Session, train: Sequence[Task], url: str) -> dict[str, Any]:
        """Run the rollouts the teacher store lacks; the counts and the teacher's mean reward."""
        from tether.store import open_store
        from tether.training.engine.session import Session as TeacherSession

        store = open_store(url)
        try:
            done = await store.list_rollouts(status=RolloutStatus.SUCCEEDED)
        finally:
            await store.close()
        missing = self.rollouts - len(done)
        failed, problems = 0, []
        if missing > 0:
            rng = random.Random(f"{session.settings.seed}:warmstart:{len(done)}")
            tasks = [train[i % len(train)] for i in rng.sample(range(max(missing, len(train))), missing)]
            settings = replace(session.settings, progress=False)
            sampling = {"temperature": self.temperature} if self.temperature is not None else None
            # the teacher answers every sub-agent: one shared policy (the agent's map is the student's)
            agent = dataclasses.replace(session.agent, policies=PolicyMap.from_optimize(None))
            bar = rollouts_bar("teacher", missing, enabled=session.settings.progress)
            try:
                async with TeacherSession(agent, self.teacher, store=url, settings=settings) as teacher:
                    batch = await teacher.run_batch(  # kept in the store
                        tasks, 1, sampling, Mode.TRAIN, harvest=False, progress=bar
                    )
            finally:
                bar.close()
            failed, problems = batch.failed, batch.problems
            store = open_store(url)
            try:
                done = await store.list_rollouts(status=RolloutStatus.SUCCEEDED)
            finally:
                await store.close()
        rewards = [r.reward for r in done if r.reward is not None]
        return {
            "kind": "warmstart",
            "step": 0,
            "teacher_rollouts": len(done),
            "kept": sum(r >= self.min_reward for r in rewards),
            "teacher_reward": sum(rewards) / len(rewards) if rewards else 0.0,
            "asked": max(missing, 0),
            "teacher_failed": failed,
            "problem": problems[0] if problems else "",
        }

    async def _refit(self, backend: ModelBackend, url: str) -> None:
        """A fresh embedded model's tokenizer retrained on the teacher's traffic (no-op for any other model)."""
        if not isinstance(backend, RefitsTokenizer):
            return
        from tether.algorithms.sft_data import read_finished, select
        from tether.store import open_store

        store = open_store(url)
        try:
            items = await read_finished(store)
        finally:
            await store.close()
        corpus: list[str] = []
        for e in select(items, self._sft().filter).examples:
            corpus.extend(str(m.get("content") or "") for m in e.messages)
            corpus.append(json.dumps(e.tools) if e.tools else "")
            corpus.append(json.dumps(_without_call_ids(e.reply)))
        backend.refit_tokenizer(corpus)

    def _sft(self, source: str | None = None) -> Any:
        """The fine-tuning, as ``tether.SFT`` (imports torch)."""
        try:
            from tether.algorithms.sft import SFT
        except ImportError as exc:
            raise ImportError(f'WarmStart needs torch: pip install "tether[embedded]" ({exc})') from None

        return SFT(
            source=source,
            retokenize=True,  # the teacher's token ids, if any, are not the student's
            schedule="cosine",
            **{name: getattr(self, name) for name in _SFT_SETTINGS},
        )


def _without_call_ids(reply: dict[str, Any]) -> dict[str, Any]:
    """``reply`` without its tool calls' ids: the teacher makes them up at random (no chat template renders them),
    and a tokenizer fitted to random text would differ from run to run."""
    calls = reply.get("tool_calls")
    if not isinstance(calls, list):
        return reply
    kept = [{k: v for k, v in c.items() if k != "id"} if isinstance(c, dict) else c for c in calls]
    return {**reply, "tool_calls": kept}
