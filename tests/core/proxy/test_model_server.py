"""``tether serve`` without torch: the model server (the proxy in serve mode) in front of the fake LLM through a
pass-through ``http://`` model, its token rule (none on loopback, required beyond it, checked as a bearer token),
no rollout URLs, the folder rules of ``model_for``, and the CLI as a real subprocess on a free loopback port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest
from click.testing import CliRunner

from tether.cli import main
from tether.models.remote import RemoteBackend
from tether.proxy.model_server import ModelServer, model_for
from tether.testing.fake_llm import FakeLLM, text, tool_call

CALC = {
    "type": "function",
    "function": {"name": "calc", "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}},
}


async def test_serves_chat_and_responses_and_no_rollouts() -> None:
    async with FakeLLM() as llm, ModelServer(RemoteBackend(llm.base_url)) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        llm.add(tool_call("calc", {"expr": "2+3"}), text("5"))
        chat = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "2+3?"}], tools=[CALC]
        )
        calls = chat.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "calc"  # type: ignore[union-attr]
        answer = await client.responses.create(model="m", input="2+3?")
        assert answer.output_text == "5"
        await client.close()
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{server.url}/r/ro-1/at-1/v1/chat/completions", json={}) as resp:
                assert resp.status == 404 and "serves no rollouts" in (await resp.json())["error"]["message"]
    assert len(llm.requests) == 2


async def test_a_token_is_checked_as_a_bearer_token() -> None:
    async with FakeLLM() as llm, ModelServer(RemoteBackend(llm.base_url), token="s3cret") as server:
        llm.add(text("hi"))
        for key in ("wrong", ""):
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key=key or "x", max_retries=0)
            headers = {"Authorization": ""} if not key else {}
            with pytest.raises(openai.AuthenticationError, match="bearer token"):
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], extra_headers=headers
                )
            await client.close()
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="s3cret", max_retries=0)
        out = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert out.choices[0].message.content == "hi"
        await client.close()
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/health") as resp:
            assert resp.status == 200  # a health check needs no token
    assert len(llm.requests) == 1


def test_beyond_loopback_a_token_is_required() -> None:
    with pytest.raises(ValueError, match=r"without a token.*--token"):
        ModelServer(RemoteBackend("http://127.0.0.1:9/v1"), host="0.0.0.0")
    result = CliRunner().invoke(
        main, ["serve", "--host", "0.0.0.0", "http://127.0.0.1:9/v1"], env={"TETHER_SERVE_TOKEN": None}
    )
    assert (
        result.exit_code == 1
        and "Error: refusing to serve the model on '0.0.0.0' without a token" in result.output
    )
    ModelServer(RemoteBackend("http://127.0.0.1:9/v1"), host="::1")  # loopback: fine


def test_model_for_run_folders_checkpoints_and_policies(tmp_path: Path) -> None:
    assert model_for("smollm2") == "smollm2" and model_for("http://h:1/v1") == "http://h:1/v1"
    run = tmp_path / "runs" / "calc"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="run folder without a checkpoint yet"):
        model_for(str(run))
    (run / "checkpoint").mkdir()
    (run / "checkpoint" / "config.json").write_text("{}")
    assert model_for(str(run)) == f"hf:{run / 'checkpoint'}" == model_for(str(run / "checkpoint"))
    with pytest.raises(ValueError, match="holds one policy's weights: drop --policy"):
        model_for(str(run), "writer")
    (run / "checkpoint" / "policies.json").write_text(json.dumps({"policies": ["writer", "checker"]}))
    with pytest.raises(ValueError, match=r"policies \['writer', 'checker'\] \(no --policy given\)"):
        model_for(str(run))
    assert model_for(str(run), "checker") == f"hf:{run / 'checkpoint' / 'policies' / 'checker'}"
    with pytest.raises(ValueError, match="neither a run folder"):
        model_for(str(tmp_path))
    with pytest.raises(ValueError, match="is not a folder"):
        model_for("smollm2", "writer")


@pytest.fixture
def served() -> Iterator[tuple[FakeLLM, str]]:
    """``tether serve <fake LLM URL> --port 0 --token t`` as a real process; yields the fake LLM and the base
    URL it printed."""
    with FakeLLM() as llm:
        env = {**os.environ, "TETHER_SERVE_TOKEN": "t"}
        command = [
            sys.executable,
            "-c",
            "from tether.cli import main; main()",
            "serve",
            llm.base_url,
            "--port",
            "0",
        ]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert " at http://127.0.0.1:" in line, line + process.stdout.read()
            yield llm, line.split(" at ", 1)[1].strip()
        finally:
            process.send_signal(signal.SIGTERM)
            out, _ = process.communicate(timeout=30)
        assert process.returncode == 0 and "tether serve stopped" in out, out


def test_the_cli_serves_until_sigterm(served: tuple[FakeLLM, str]) -> None:
    llm, url = served
    assert url.endswith("/v1")
    llm.add(text("four"))
    client = openai.OpenAI(base_url=url, api_key="t", max_retries=0)
    with client.responses.stream(model="m", input="2+2?") as stream:
        assert stream.get_final_response().output_text == "four"
    client.close()
