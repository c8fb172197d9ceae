"""``tether serve`` on what a run trained: a calculator agent's model (the nano embedded model warm-started on
calculator demonstrations, then one GRPO step of ``Trainer.fit`` on a plain openai-SDK calculator agent, which
writes ``runs/calc/checkpoint``) served by ``tether serve runs/calc`` as a real process on a free loopback
port; the same agent, given the printed URL as its base URL, gets its tool call and its answer through Chat
Completions and the Responses API, streaming and not.

The calculator demo itself (``tether demo``, examples/calc_autogen) trains for minutes: this checks the wiring
(a trained checkpoint, served, calls the tool and answers with a number) on a model trained in seconds, not the
demo's accuracy: the nano model's sums are wrong.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.models.embedded import create_embedded, sft  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)  # the user's own URL
SYSTEM = {"role": "system", "content": "Use calc, then answer with the number."}  # the demonstrations' (conftest)
CALC_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate arithmetic",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
    },
}
RESPONSES_TOOL = {"type": "function", **CALC_TOOL["function"]}


def _calc(expr: str) -> str:
    a, b = expr.split("+")
    return str(int(a) + int(b))


def calculator_agent(question: str) -> str:
    """The user's agent on Chat Completions: ask, run the calc tool it calls, send the result back."""
    messages: list[Any] = [SYSTEM, {"role": "user", "content": question}]
    for _ in range(3):
        reply = client.chat.completions.create(model="calc", messages=messages, tools=[CALC_TOOL], temperature=0)
        message = reply.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = _calc(json.loads(call.function.arguments)["expr"])  # type: ignore[union-attr]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return ""


def reward(task: str, output: str) -> float:
    a, b = task.removeprefix("What is ").removesuffix("?").split("+")
    return float(output.strip() == str(int(a) + int(b)))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, make_calc_conversation: Any, calc_tool: Any) -> Path:
    """``runs/calc`` after one GRPO step from a warm start on calculator demonstrations."""
    assert calc_tool == CALC_TOOL
    rng = random.Random(0)
    demos = [make_calc_conversation(rng) for _ in range(300)]
    model = create_embedded([json.dumps(d) for d in demos[:50]], preset="nano", seed=0)
    sft(model, demos, [CALC_TOOL], epochs=8, lr=3e-3, batch_size=16, seed=0, progress=False)
    root = tmp_path_factory.mktemp("serve")
    warm = model.save(root / "warm")
    tasks = [f"What is {a}+{b}?" for a, b in ((12, 7), (30, 41), (5, 66), (80, 9))]
    tether.Trainer(
        model=f"embedded:{warm}",
        algorithm=tether.GRPO(group_size=2, tasks_per_step=2, lr=1e-4),
        n_runners=4,
        steps=1,
        name="calc",
        run_root=str(root / "runs"),
        progress=False,
    ).fit(tether.wrap(calculator_agent, reward=reward), train=tasks, preflight=False)  # rewards may all be 0
    assert (root / "runs" / "calc" / "checkpoint" / "config.json").is_file()
    return root / "runs" / "calc"


@pytest.fixture(scope="module")
def base_url(run: Path) -> Iterator[str]:
    """``tether serve runs/calc --port 0`` as a real process; the base URL it prints."""
    command = [sys.executable, "-c", "from tether.cli import main; main()", "serve", str(run), "--port", "0"]
    env = {k: v for k, v in os.environ.items() if k != "TETHER_SERVE_TOKEN"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert process.stdout is not None
        said = []  # notices first (the sampler's dtype, on stderr), then the URL line
        for line in process.stdout:
            said.append(line)
            if line.startswith("tether serve:") or len(said) > 20:
                break
        if not said[-1].startswith("tether serve:"):
            process.kill()
            pytest.fail("tether serve printed no URL:\n" + "".join(said) + process.stdout.read())
        line = said[-1]
        assert f"hf:{run / 'checkpoint'} at http://127.0.0.1:" in line, line
        yield line.split(" at ", 1)[1].strip()
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out


QUESTION = "What is 23+45?"


def test_the_agent_on_chat_completions_calls_its_tool_and_answers(base_url: str) -> None:
    agent = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    messages: list[Any] = [SYSTEM, {"role": "user", "content": QUESTION}]
    first = agent.chat.completions.create(model="calc", messages=messages, tools=[CALC_TOOL], temperature=0)
    (call,) = first.choices[0].message.tool_calls or []
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "calc"  # type: ignore[union-attr]
    result = _calc(json.loads(call.function.arguments)["expr"])  # type: ignore[union-attr]
    messages += [first.choices[0].message.model_dump(exclude_none=True)]
    messages += [{"role": "tool", "tool_call_id": call.id, "content": result}]
    stream = agent.chat.completions.create(
        model="calc", messages=messages, tools=[CALC_TOOL], temperature=0, stream=True
    )
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    again = agent.chat.completions.create(model="calc", messages=messages, tools=[CALC_TOOL], temperature=0)
    assert streamed.isdigit() and streamed == again.choices[0].message.content  # a number, streamed or not
    agent.close()


def test_the_agent_on_the_responses_api_calls_its_tool_and_answers(base_url: str) -> None:
    agent = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    items: list[Any] = [{"role": "user", "content": QUESTION}]
    first = agent.responses.create(
        model="calc",
        instructions=SYSTEM["content"],
        input=items,
        tools=[RESPONSES_TOOL],
        temperature=0,  # type: ignore[list-item]
    )
    (call,) = [o for o in first.output if o.type == "function_call"]
    assert call.name == "calc"
    items += [o.model_dump(exclude_none=True) for o in first.output]
    items.append(
        {
            "type": "function_call_output",
            "call_id": call.call_id,
            "output": _calc(json.loads(call.arguments)["expr"]),
        }
    )
    with agent.responses.stream(
        model="calc",
        instructions=SYSTEM["content"],
        input=items,
        tools=[RESPONSES_TOOL],
        temperature=0,  # type: ignore[arg-type]
    ) as stream:
        streamed = stream.get_final_response()
    plain = agent.responses.create(
        model="calc",
        instructions=SYSTEM["content"],
        input=items,
        tools=[RESPONSES_TOOL],
        temperature=0,  # type: ignore[list-item]
    )
    assert streamed.output_text.isdigit() and streamed.output_text == plain.output_text
    # the same prompt as on Chat Completions (instructions are its system message): the same greedy call
    chat = agent.chat.completions.create(
        model="calc", messages=[SYSTEM, {"role": "user", "content": QUESTION}], tools=[CALC_TOOL], temperature=0
    )
    assert chat.choices[0].message.tool_calls[0].function.arguments == call.arguments  # type: ignore[index,union-attr]
    agent.close()
