"""A fixed test of the checker alone: held-out questions, each with three queries to judge.

In the agent's loop the checker judges whatever the writer wrote, so its verdict accuracy moves when the
writer improves even if the checker does not (a writer that is always right makes "always OK" perfect).
The probe holds the queries still: for each held-out question the gold query (right answer: OK), the query
in the other sense (valid SQL, wrong rows: FIX) and the gold query with a misspelt column (an SQL error: FIX).
A graph of the agent's own ``execute`` and ``check_query`` nodes runs each one; the reward is whether the
verdict was right (``data.verdict_right``). The probe graph's node has the agent's name, ``check_query``, so
the same ``optimize=`` routes it to the same policy.
"""

from __future__ import annotations

from typing import Any

import data

KINDS = ("gold", "confused", "typo")


def probe_graph(agent_module: Any) -> Any:
    """``execute`` then ``check_query`` (the agent's own nodes) on a given question and query."""
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(agent_module.State)
    builder.add_node("execute", agent_module.execute)
    builder.add_node("check_query", agent_module.check_query)
    builder.add_edge(START, "execute")
    builder.add_edge("execute", "check_query")
    builder.add_edge("check_query", END)
    return builder.compile(name="checker_probe")


def probe_tasks(questions: list[data.Question]) -> list[dict[str, Any]]:
    """Three tasks per question, one per kind of query: the graph's input state plus the gold to score by."""
    tasks = []
    for q in questions:
        for kind, query in zip(KINDS, (q.sql, q.confused, q.typo), strict=True):
            tasks.append({**q.task(), "query": query, "kind": kind})
    return tasks


def probe_reward(task: dict[str, Any], output: Any) -> float:
    """1 when the checker's verdict on the task's query was right."""
    verdict = output.get("verdict", "") if isinstance(output, dict) else ""
    return float(data.verdict_right(task, task["query"], str(verdict)))


def probe_accuracy(
    agent_module: Any, model: Any, questions: list[data.Question], optimize: Any = None, runners: int = 16
) -> dict[str, float]:
    """Greedy verdict accuracy of ``model``'s checker on the probe: over all queries and per kind.
    ``optimize`` is the agent's: it routes the probe's ``check_query`` calls to the same policy."""
    import tether

    wrapped = tether.wrap(probe_graph(agent_module), reward=probe_reward, optimize=optimize)
    trainer = tether.Trainer(
        model=model, n_runners=runners, sampling={"temperature": 0.0, "max_tokens": 80}, progress=False
    )
    report = trainer.dev(wrapped, probe_tasks(questions))
    # the probe graph runs only the checker's node: the writer's names in ``optimize`` are not called
    problems = [p for p in report.all_problems if not p.startswith("unknown sub-agent")]
    if problems:
        raise RuntimeError("the checker probe went wrong:\n" + "\n".join(problems[:5]))
    right: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for rollout in report:
        right[rollout.rollout.input["kind"]].append(rollout.reward or 0.0)
    scores = [r for rs in right.values() for r in rs]
    return {"all": sum(scores) / len(scores), **{k: sum(rs) / len(rs) for k, rs in right.items()}}
