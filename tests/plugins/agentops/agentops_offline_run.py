"""Run in a subprocess by the offline test, from a temporary working directory: a user's AgentOps-instrumented
agent trained through ``Trainer.dev`` with AgentOps pointed at loopback, every outbound connection blocked and
recorded until the very end of the process (AgentOps exports and uploads at exit too).

Prints one JSON line at exit: the connection attempts, the rollouts' AgentOps spans, and whether
``./agentops.log`` exists."""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path
from typing import Any

import outbound_guard

outbound_guard.install()
_result: dict[str, Any] = {}


def _report() -> None:  # registered first, so it runs after AgentOps' own exit handlers
    _result["attempts"] = outbound_guard.attempts
    _result["agentops_log"] = Path("agentops.log").exists()
    sys.stdout.write("RESULT " + json.dumps(_result) + "\n")
    sys.stdout.flush()


atexit.register(_report)

import tether_agentops  # noqa: E402

if os.environ.get("OFFLINE_MODE", "use_offline") == "use_offline":
    tether_agentops.use_offline()

import agentops_calc_agent  # noqa: E402  (calls agentops.init at import, as a user's module does)
from calc_script import reply  # noqa: E402

import tether  # noqa: E402
from tether._loop import run_sync  # noqa: E402
from tether.models.remote import RemoteBackend  # noqa: E402
from tether.testing.fake_llm import FakeLLM  # noqa: E402

print("the agent prints: AgentOps keeps this for its log upload")
with FakeLLM(handler=reply) as llm:
    backend = RemoteBackend(llm.base_url, return_token_ids=True)
    agent = tether.wrap(agentops_calc_agent.solve, adapter="openai", reward=lambda task, out: 1.0)
    report = tether.Trainer(model=backend).dev(agent, ["What is 1 + 4?"])
    run_sync(backend.close())
_result["statuses"] = [r.status.value for r in report]
_result["agentops_kinds"] = [
    s.kind.value for r in report for s in r.spans if s.attributes.get("source") == "agentops"
]
_result["problems"] = tether_agentops.offline_problems()
_result["uninstrumented"] = not tether_agentops.tracer.attached
_result["transition_agents"] = [t.agent_name for r in report for t in r.transitions]
