"""In fresh processes: a rollout of an AgentOps-instrumented agent with ``use_offline()`` attempts no outbound
connection (every one blocked and recorded until the process exits, AgentOps' exit handlers included) and
leaves no ``agentops.log``; the same run without it does both (so the guard would catch a regression); an
agent that never opted in does not import AgentOps at all; ``tether plugins`` lists the plugin as loaded, or
as unavailable with its install hint when AgentOps is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTOPS_")}
    environment["PYTHONPATH"] = os.pathsep.join([str(HERE), environment.get("PYTHONPATH", "")])
    environment.update(env)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=240
    )


def _offline_run(cwd: Path, mode: str) -> dict[str, Any]:
    done = _run([str(HERE / "agentops_offline_run.py")], cwd, OFFLINE_MODE=mode)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    result["warned"] = "AgentOps is not offline" in done.stderr
    return result


def test_an_offline_rollout_attempts_no_outbound_connection_and_writes_no_log(tmp_path: Path) -> None:
    result = _offline_run(tmp_path, "use_offline")
    assert result["statuses"] == ["succeeded"]
    assert result["agentops_kinds"] == ["llm", "tool", "llm", "other"]
    assert result["transition_agents"] == ["calc_agent", "calc_agent"]
    assert result["problems"] == []
    assert result["uninstrumented"]
    blocked = [a for a in result["attempts"] if a["blocked"]]
    assert blocked == []
    # the guard saw the run's own traffic (proxy, fake LLM) and AgentOps' log upload going to loopback
    assert any(a["port"] == 9 for a in result["attempts"])
    assert len(result["attempts"]) >= 3
    assert not result["agentops_log"]
    assert not result["warned"]
    assert list(tmp_path.iterdir()) == []


def test_without_offline_settings_agentops_calls_home_and_writes_its_log(tmp_path: Path) -> None:
    result = _offline_run(tmp_path, "none")
    assert result["statuses"] == ["succeeded"]
    assert {a["host"] for a in result["attempts"] if a["blocked"]} == {"api.agentops.ai"}
    assert result["agentops_log"] and (tmp_path / "agentops.log").exists()
    assert any("AGENTOPS_LOGGING_TO_FILE" in p for p in result["problems"])
    assert any("AGENTOPS_EXPORTER_ENDPOINT" in p for p in result["problems"])
    assert result["warned"]  # the tracer said so when it attached


def test_agentops_initialised_during_a_rollout_is_attached_from_the_next_one(tmp_path: Path) -> None:
    probe = textwrap.dedent(
        """
        import tether, tether_agentops
        from calc_script import reply
        from tether.testing.fake_llm import FakeLLM

        tether_agentops.use_offline()

        def solve(question):
            import agentops_calc_agent  # the user's module, and its agentops.init, load in the first rollout
            return agentops_calc_agent.solve(question)

        with FakeLLM(handler=reply) as llm:
            trainer = tether.Trainer(model=llm.base_url, n_runners=1)
            report = trainer.dev(tether.wrap(solve, adapter="openai"), ["What is 1 + 2?"] * 2)
        print([[s.kind.value for s in r.spans if s.attributes.get("source") == "agentops"] for r in report])
        """
    )
    done = _run(["-c", probe], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[[], ['llm', 'tool', 'llm', 'other']]"


def test_an_agent_that_never_opted_in_does_not_import_agentops(tmp_path: Path) -> None:
    probe = textwrap.dedent(
        """
        import sys
        import openai
        import tether
        from tether.plugin.manager import get_plugins
        from tether.testing.fake_llm import FakeLLM, text

        def answer(question):
            client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk", max_retries=0)
            return client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}])\\
                .choices[0].message.content

        assert "agentops" in [p.name for p in get_plugins().loaded()]
        with FakeLLM(handler=lambda request: text("hi")) as llm:
            report = tether.Trainer(model=llm.base_url).dev(tether.wrap(answer), ["q"])
        assert [r.status.value for r in report] == ["succeeded"], [r.error for r in report]
        import tether_agentops
        assert not tether_agentops.tracer.attached
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("agentops", "opentelemetry")))
        """
    )
    done = _run(["-c", probe], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert list(tmp_path.iterdir()) == []


def test_tether_plugins_lists_it_loaded_or_unavailable_with_the_hint(tmp_path: Path) -> None:
    cli = "import sys; {hide}from tether.cli import main; sys.argv = ['tether', 'plugins']; main()"
    loaded = _run(["-c", cli.format(hide="")], tmp_path, COLUMNS="200")
    assert loaded.returncode == 0, loaded.stderr
    row = next(line for line in loaded.stdout.splitlines() if "agentops" in line)
    assert "register_tracers" in row and "rollout_context" in row
    # importlib finds no module recorded as None in sys.modules: AgentOps as if not installed
    missing = _run(["-c", cli.format(hide="sys.modules['agentops'] = None; ")], tmp_path, COLUMNS="200")
    assert missing.returncode == 0, missing.stderr
    assert "unavailable plugins" in missing.stdout
    row = next(line for line in missing.stdout.splitlines() if "agentops" in line)
    assert 'pip install "tether[agentops]"' in row and "not installed: agentops" in row
