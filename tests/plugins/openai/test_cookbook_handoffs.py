"""A cookbook-style handoff loop (raw openai client) through ``Trainer.dev``, and agents that raise
``BaseException``s: a tool calling ``exit()``, ``KeyboardInterrupt`` or ``GeneratorExit`` fails its own
rollout with the exception's text; tether's event loop goes on (a second ``dev`` works) and nothing hangs.
The user's Ctrl-C still stops a run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import cookbook_handoffs
import pytest

import tether
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call
from tether.types import RolloutStatus

HERE = Path(__file__).parent


def _support_model(request: dict[str, Any]) -> Reply:
    """The scripted model: triage routes refunds to repairs and escalations to a human; repairs look the item
    up, refund it, then answer."""
    messages = request["messages"]
    system, user = messages[0]["content"], messages[1]["content"]
    said = [m["content"] for m in messages if m["role"] == "tool"]
    if system.startswith("You are a customer service bot"):
        if "human" in user:
            return tool_call("escalate_to_human", {"summary": user})
        return tool_call("transfer_to_issues_and_repairs", {})
    if system.startswith("You are a customer support agent"):
        if "item_132612938" not in said:
            return tool_call("look_up_item", {"search_query": user})
        if "success" not in said:
            return tool_call("execute_refund", {"item_id": "item_132612938", "reason": "broken"})
        return text("Your refund is on its way.")
    return text("?")


def _dev_in_thread(trainer: tether.Trainer, agent: Any, tasks: list[str], timeout_s: float = 60) -> Any:
    """``trainer.dev`` from a daemon thread, so a hang fails the test instead of stopping the suite."""
    out: dict[str, Any] = {}

    def _go() -> None:
        try:
            out["report"] = trainer.dev(agent, tasks)
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=_go, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"Trainer.dev did not return within {timeout_s} s"
    if "error" in out:
        raise out["error"]
    return out["report"]


def test_cookbook_handoffs_with_an_exiting_tool_fail_only_that_rollout() -> None:
    agent = tether.wrap(cookbook_handoffs.serve_customer, reward=lambda task, out: float("refund" in out))
    tasks = ["My toaster is broken, I want a refund", "Let me talk to a human please", "Refund my blender"]
    with FakeLLM(handler=_support_model) as llm:
        trainer = tether.Trainer(model=llm.base_url)
        report = _dev_in_thread(trainer, agent, tasks)
        by_task = {r.rollout.input: r for r in report}
        escalated = by_task[tasks[1]]
        assert escalated.status == RolloutStatus.FAILED
        assert "SystemExit" in (escalated.error or "")
        for task in (tasks[0], tasks[2]):
            assert by_task[task].status == RolloutStatus.SUCCEEDED, by_task[task].error
            assert by_task[task].reward == 1.0
            # the handoff loop's four calls: triage, then repairs three times (look up, refund, answer)
            assert len(by_task[task].transitions) == 4
        # tether's loop survived: the same trainer runs again
        again = _dev_in_thread(trainer, agent, [tasks[0]])
        assert [r.status for r in again] == [RolloutStatus.SUCCEEDED]


def _raising(kind: str) -> Any:
    def agent(question: str) -> str:
        cookbook_handoffs.client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": question}]
        )
        if kind == "KeyboardInterrupt":
            raise KeyboardInterrupt("raised by a tool")
        if kind == "GeneratorExit":
            raise GeneratorExit("misused")
        raise SystemExit(3)

    return agent


@pytest.mark.parametrize("kind", ["KeyboardInterrupt", "GeneratorExit", "SystemExit"])
def test_an_agent_raising_a_base_exception_fails_its_rollout(kind: str) -> None:
    agent = tether.wrap(_raising(kind))
    with FakeLLM(handler=lambda request: text("ok")) as llm:
        trainer = tether.Trainer(model=llm.base_url)
        report = _dev_in_thread(trainer, agent, ["q1", "q2"])
        assert [r.status for r in report] == [RolloutStatus.FAILED] * 2
        assert all(kind in (r.error or "") for r in report), [r.error for r in report]
        ok = _dev_in_thread(trainer, tether.wrap(cookbook_handoffs.serve_customer), ["refund please"])
        assert [r.status for r in ok] == [RolloutStatus.SUCCEEDED]


async def _exits_on_the_loop(question: str) -> str:
    exit()


def test_an_async_agent_calling_exit_on_tethers_loop_fails_its_rollout() -> None:
    with FakeLLM(handler=lambda request: text("ok")) as llm:
        trainer = tether.Trainer(model=llm.base_url)
        report = _dev_in_thread(trainer, tether.wrap(_exits_on_the_loop), ["q"])
        assert [r.status for r in report] == [RolloutStatus.FAILED]
        assert "SystemExit" in (report[0].error or "")


_CTRL_C_SCRIPT = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background job ignores SIGINT)
sys.path.insert(0, {here!r})
import cookbook_handoffs
import tether
from tether.testing.fake_llm import FakeLLM, text

def slow(question):
    cookbook_handoffs.client.chat.completions.create(model="m", messages=[{{"role": "user", "content": "x"}}])
    time.sleep(8)
    return "late"

with FakeLLM(handler=lambda request: text("ok")) as llm:
    trainer = tether.Trainer(model=llm.base_url)
    print("running", flush=True)
    try:
        trainer.dev(tether.wrap(slow), ["q"])
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        raise
"""


def test_ctrl_c_still_stops_a_run(tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(_CTRL_C_SCRIPT.format(here=str(HERE))))
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "running"
    time.sleep(2)  # the rollout is in its sleep
    os.kill(proc.pid, signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert "interrupted" in out and proc.returncode != 0, out
