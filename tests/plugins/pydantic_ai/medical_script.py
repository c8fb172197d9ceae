"""The PydanticAI medical triage example (fixtures/medical_agent_delegation.py, unchanged), loaded for the tests,
and how the fake LLM answers it from the request alone (so concurrent rollouts each get a consistent script):
the triage agent consults the cardiology specialist for a chest complaint, the senior doctor for "the worst
headache" and the general practitioner otherwise; each consulted agent answers with its structured output (the
``final_result`` output tool), and the triage agent then answers with the tool's result as its own."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tether.testing.fake_llm import Reply, tool_call

FIXTURE = Path(__file__).parent / "fixtures" / "medical_agent_delegation.py"
AGENTS = {"triage_agent", "gp_agent", "cardiology_agent", "neurology_agent", "senior_doctor_agent"}


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


example = _load("medical_agent_delegation", FIXTURE)


def complaint(i: int) -> str:
    kinds = ["Sudden chest pain radiating to the left arm", "Worst headache of my life", "A mild cough"]
    return f"{kinds[i % 3]} (case {i})"


def task(i: int) -> dict[str, Any]:
    return {"prompt": complaint(i), "patient_id": f"P{i:03d}", "age": 40 + i}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content)
    return "" if content is None else str(content)


def _output_tool(request: dict[str, Any]) -> str:
    names = [t["function"]["name"] for t in request.get("tools") or [] if t.get("type") == "function"]
    return next(n for n in names if n.startswith("final_result"))


_REPORT = {
    "diagnosis": ["angina"],
    "differential": ["reflux"],
    "recommended_tests": ["ECG"],
    "immediate_actions": ["aspirin"],
    "estimated_time_minutes": 30,
}
_PLAN = {"plan_summary": "admit and scan", "refer_to_specialist": "neurology", "follow_up_days": 2}


def reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    system = " ".join(_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    question = users[-1] if users else ""
    results = [m for m in messages if m.get("role") == "tool"]
    if "triage clinician" in system:
        if results:  # the consultation's TriageFinalOutput becomes the triage agent's own output
            return tool_call(_output_tool(request), json.loads(_text(results[-1]["content"])))
        if "worst headache" in question.lower():
            return tool_call(
                "consult_senior_doctor", {"reason_for_escalation": "red flag", "initial_complaint": question}
            )
        specialty = "cardiology" if "chest" in question.lower() else "general"
        return tool_call("consult_specialist", {"specialty": specialty, "question": question})
    if "senior clinician" in system:
        return tool_call(_output_tool(request), _PLAN)
    return tool_call(_output_tool(request), _REPORT)  # a specialist's MedicalReport


def reward(task: dict[str, Any], output: Any) -> float:
    status = output["output"]["final_status"] if isinstance(output, dict) else None
    expected = "escalated" if "worst headache" in task["prompt"].lower() else "resolved_by_specialist"
    return float(status == expected)


async def handle_patient(agent: Any, task: dict[str, Any]) -> dict[str, Any]:
    """A ``run=`` that runs the example's own coordinator, ``MedicalTriageSystem.handle_patient``, on the agent it
    is given (the coordinator passes the patient as ``deps``, which tether's default run cannot know)."""
    patient = example.PatientInfo(patient_id=task["patient_id"], age=task["age"], known_conditions=[])
    system = example.MedicalTriageSystem()
    system.triage = agent
    return {"output": await system.handle_patient(task["prompt"], patient)}
