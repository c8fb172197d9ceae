"""The dashboard's browser tests: what they run against and the browser they drive.

A folder of runs made by real tether code: ``apo/`` by the room example's own ``train.py --apo`` (an APO fit of
the plain-OpenAI room agent: metrics, APO history, a store with resources versions), and ``concierge/`` by
``Trainer.dev`` and a train batch of a two-sub-agent agent (a ``triage`` call, then the room example's
``book_meeting`` unchanged) into its ``store.db``, with token ids and logprobs from the fake LLM. All models are
tether's fake OpenAI-compatible server. The browser is Debian's Chromium (``/usr/bin/chromium``, which
``.ci/run`` installs) driven by Playwright; no browser is downloaded. Screenshots go to
``$TETHER_DASHBOARD_ARTIFACTS`` (tox: ``.tox/dashboard/artifacts``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import tether
from tether.algorithms import apo_prompts
from tether.capture.context import agent_scope
from tether.dashboard.server import DashboardServer, start_dashboard
from tether.dashboard.sources import Sources
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, text, tool_call
from tether.training.engine.session import as_task
from tether.types import AttemptStatus, Mode, RolloutSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))  # tests/examples' helper, shared
from example_modules import example_modules

CHROMIUM = os.environ.get("TETHER_CHROMIUM", "/usr/bin/chromium")
BETTER_HINT = " Needs: slides mean projector, sketching whiteboard, remote calls video."
BIG = 100_000  # rollouts in the paging test's store


# -- the example's modules ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def room() -> Iterator[dict[str, ModuleType]]:
    with example_modules("room_openai", "offices", "data", "agent", "train") as modules:
        yield modules


def room_model(data: ModuleType, offices: ModuleType) -> Any:
    """The booking model: books the right room when the system prompt maps needs to equipment, else asks
    for video rooms half the time; the triage model escalates every fourth request."""

    rng = random.Random(0)

    def handler(request: dict[str, Any]) -> Any:
        messages = request["messages"]
        if request.get("model") == "triage-model":
            ask = messages[-1]["content"]
            return text("escalate" if len(ask) % 4 == 0 else "book")
        results = [m for m in messages if m["role"] == "tool"]
        if results:
            found = json.loads(results[-1]["content"])
            return tool_call("book_room", {"room": found[0]["room"]})
        system, ask = messages[0]["content"], messages[1]["content"]
        need = next(e for e, phrases in data.NEEDS.items() if any(p in ask for p in phrases))
        equipment = need if "slides mean projector" in system or rng.random() < 0.5 else "video"
        floor = int(re.search(r"floor (\d+)", ask).group(1))  # type: ignore[union-attr]
        seats_match = re.search(r"(\d+) people|We are (\d+)", ask)
        seats = int(seats_match.group(1) or seats_match.group(2))  # type: ignore[union-attr]
        office = system.split(" the ")[1].split(" office")[0]
        if not offices.find_rooms(office, floor, seats, equipment):
            return text("No room fits.")
        return tool_call("find_rooms", {"floor": floor, "seats": seats, "equipment": equipment})

    return handler


def optimizer_model(agent_module: ModuleType) -> Any:
    def handler(request: dict[str, Any]) -> Any:
        if request["messages"][0]["content"] == apo_prompts.CRITIC_SYSTEM:
            return text("The agent confuses the equipment: say which need means which equipment.")
        return text(f"<prompt>{agent_module.SYSTEM_PROMPT}{BETTER_HINT}</prompt>")

    return handler


# -- the runs folder ---------------------------------------------------------------------------------------------


def _concierge(room: dict[str, ModuleType]) -> Any:
    import openai

    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-user", max_retries=0)
    book_meeting = room["agent"].book_meeting

    def concierge(task: dict[str, Any], system_prompt: str | None = None) -> Any:
        """Triage the request, then hand it to the room example's agent (unchanged)."""
        with agent_scope("triage"):
            verdict = client.chat.completions.create(
                model="triage-model",
                messages=[
                    {"role": "system", "content": "Answer book or escalate."},
                    {"role": "user", "content": task["request"]},
                ],
            )
        if verdict.choices[0].message.content == "escalate":
            raise RuntimeError("triage escalated the request: no agent books it")
        tether.emit_reward(0.1, name="triaged")
        with agent_scope("book_meeting"):
            return book_meeting(task, system_prompt=system_prompt)

    return concierge


async def _fill_concierge(room: dict[str, ModuleType], llm: FakeLLM, store_url: str) -> None:
    data, train = room["data"], room["train"]
    tasks = [r.task() for r in data.splits(n_train=16, n_val=0, n_test=0, seed=1)["train"]]
    backend = RemoteBackend(llm.base_url, return_token_ids=True, logprobs=True)
    try:
        trainer = tether.Trainer(model=backend, store=store_url, progress=False, n_runners=4)
        wrapped = tether.wrap(
            _concierge(room),
            reward=data.reward,
            optimize=["book_meeting"],
            run=train.prompt_runner(room["agent"].SYSTEM_PROMPT),
        )
        await trainer.adev(wrapped, tasks[:8])
        async with trainer.session(wrapped) as session:  # a GRPO-like batch: 4 tasks x 2 samples, kept
            await session.run_batch([as_task(t) for t in tasks[8:12]], repeats=2, mode=Mode.TRAIN, harvest=False)
    finally:
        await backend.close()


@pytest.fixture(scope="session")
def runs(room: dict[str, ModuleType], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    data, offices, agent, train = room["data"], room["offices"], room["agent"], room["train"]
    with FakeLLM(handler=room_model(data, offices)) as llm, FakeLLM(handler=optimizer_model(agent)) as opt:
        argv = ["--apo", "--agent-model", llm.base_url, "--optimizer-model", opt.base_url, "--run-dir", str(root)]
        argv += ["--n-train", "8", "--n-val", "8", "--n-test", "4", "--rounds", "2", "--beam-width", "1"]
        argv += ["--branch-factor", "1", "--train-batch-size", "4", "--val-batch-size", "8", "--runners", "4"]
        assert _in_thread(train.main, argv) == 0
        (root / "concierge").mkdir()
        _in_thread(asyncio.run, _fill_concierge(room, llm, f"sqlite:///{root / 'concierge' / 'store.db'}"))
    return root


def _in_thread(function: Any, *args: Any) -> Any:
    """Run on a thread of its own: Playwright's sync API keeps an event loop running on the main thread."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            out.append(function(*args))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out[0]


async def _fill_big(url: str, n: int) -> None:
    store = tether.open_store(url)
    rng = random.Random(0)
    try:
        for start in range(0, n, 5000):
            specs = [
                RolloutSpec(input={"n": i}, task_id=f"task-{i % 997}", mode=Mode.TRAIN, resources_version=1)
                for i in range(start, min(n, start + 5000))
            ]
            await store.enqueue(specs)
            claimed = await store.dequeue("filler", limit=len(specs))

            async def finish(attempt_id: str) -> None:
                ok = rng.random() < 0.85
                await store.finish_attempt(
                    attempt_id,
                    AttemptStatus.SUCCEEDED if ok else AttemptStatus.FAILED,
                    reward=round(rng.random(), 3) if ok else None,
                    error=None if ok else "ValueError: the model booked a room that does not exist",
                )

            await asyncio.gather(*(finish(attempt.attempt_id) for _, attempt in claimed))
    finally:
        await store.close()


@pytest.fixture(scope="session")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('big') / 'store.db'}"
    _in_thread(asyncio.run, _fill_big(url, BIG))
    return url


# -- a dashboard on a thread, a browser -----------------------------------------------------------------------


class Served:
    """A dashboard served from its own event loop on a thread (the browser tests are synchronous)."""

    def __init__(self, sources: Sources, token: str | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server: DashboardServer = self.call(start_dashboard(sources, token=token))
        self.url = self.server.url

    def call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(120)

    def stop(self) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("TETHER_DASHBOARD_ARTIFACTS")
    path = Path(where) if where else tmp_path_factory.mktemp("artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


# per module, not per session: sync Playwright keeps an event loop running in this thread while it is open, and
# the async tests of a later folder in the same session (tests/core/dashboard) could not start theirs
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    playwright_api = pytest.importorskip(
        "playwright.sync_api", reason="the dashboard tests need playwright (tox -e dashboard)"
    )
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (as root), or set TETHER_CHROMIUM")
    with playwright_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A laptop-sized page; any JavaScript error or console error fails the test."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, device_scale_factor=1)
    tab = context.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    tab.on(
        "console", lambda msg: problems.append(f"console {msg.type}: {msg.text}") if msg.type == "error" else None
    )
    yield tab
    context.close()
    assert not problems, problems


@pytest.fixture(scope="session")
def dashboard(runs: Path) -> Iterator[Served]:
    served = Served(Sources(None, runs))
    yield served
    served.stop()
