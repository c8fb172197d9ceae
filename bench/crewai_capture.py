"""Capture overhead of the crewai plugin per LLM call: the example crew (3 model calls, 1 tool call per
kickoff) against the fake LLM, kicked off N times plain (its LLM pointed at the fake) and N times inside a
rollout scope with the adapter instrumented (event-bus handlers, role wrapper, request listener, endpoint
redirect, bus flush) and a sink that keeps the spans. Prints wall time per kickoff and the difference per
LLM call. Needs the crewai extra: ``python bench/crewai_capture.py [--n 30]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "examples" / "crew_crewai"), str(ROOT / "tests" / "plugins" / "crewai")]

CALLS_PER_KICKOFF = 3


class _Sink:
    def __init__(self) -> None:
        self.spans: list[tuple[Any, ...]] = []

    def emit(self, kind: Any, name: str, attributes: dict[str, Any], **kwargs: Any) -> None:
        self.spans.append((kind, name, attributes, kwargs))


def _times(n: int, kickoff: Any) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        kickoff()
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=30)
    args = parser.parse_args()

    import agent as example
    from crewai.events import crewai_event_bus
    from crewai_script import reply, task

    from tether.capture import redirect
    from tether.capture.context import RolloutScope, rollout_scope
    from tether.testing.fake_llm import FakeLLM
    from tether_crewai import CrewAIAdapter, telemetry

    telemetry.hold()
    with FakeLLM(handler=reply) as llm:
        example.llm.base_url = llm.base_url
        example.llm._client = example.llm._async_client = None

        def plain() -> None:
            example.crew.copy().kickoff(inputs=task("Paris"))

        adapter, sink = CrewAIAdapter(), _Sink()

        def captured() -> None:
            with rollout_scope(RolloutScope("r", "a", llm.base_url)), redirect.installed():
                example.crew.copy().kickoff(inputs=task("Paris"))
                crewai_event_bus.flush()

        plain()  # warm up both paths
        adapter.instrument(sink)
        captured()
        adapter.uninstrument()
        base, cap = [], []
        for _ in range(2):  # interleaved rounds
            base += _times(args.n // 2, plain)
            adapter.instrument(sink)
            cap += _times(args.n // 2, captured)
            adapter.uninstrument()
    telemetry.release()
    b, c = statistics.median(base), statistics.median(cap)
    spans_per_kickoff = len(sink.spans) / (len(cap) + 1)
    print(f"kickoffs: {len(base)} plain, {len(cap)} captured ({CALLS_PER_KICKOFF} LLM calls, 1 tool call each)")
    print(f"median per kickoff: plain {b * 1000:.1f} ms, captured {c * 1000:.1f} ms")
    print(f"capture overhead per LLM call: {(c - b) / CALLS_PER_KICKOFF * 1000:.2f} ms")
    print(f"spans per kickoff: {spans_per_kickoff:.1f}")


if __name__ == "__main__":
    main()
