"""Every Python block of docs/*.md runs in a test or is marked ``<!-- not run: <reason> -->`` on the line before
its fence (``docblocks``); the blocks that need no torch run here, against the fake LLM, as written but for
what a test machine lacks (an API's URL, a served model's port). The other blocks run in the test files of
``RUNNERS``, each in the tox env that has what they need.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docblocks import ROOT, Block, block, blocks, claimed, page_blocks, run_block

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.capture.context import agent_scope  # noqa: E402
from tether.testing.fake_llm import FakeLLM, text  # noqa: E402
from tether.testing.judge import judge_handler  # noqa: E402

#: the test files that run docs blocks (``run_block("<page>:<n>", ...)``), and the tox env each runs in
RUNNERS = {
    "tests/core/top/test_docs_blocks.py": "core",
    "tests/models/top/test_docs_blocks_torch.py": "embedded",
    "tests/postgres/test_docs_blocks_postgres.py": "postgres",
    "tests/plugins/langchain/test_docs_blocks_langchain.py": "langchain",
    "tests/report/test_docs_blocks_report.py": "report",
}
#: pages a test runs whole, its own way: the tutorial writes its ``# file:`` blocks out and runs its script
WHOLE_PAGES = {"plugin-tutorial.md": "tests/core/plugin/test_plugin_tutorial.py"}


# -- every block is run or marked ----------------------------------------------------------------------------


def _runs() -> dict[str, list[str]]:
    """block name -> the test files that run it."""
    found: dict[str, list[str]] = {}
    for path in RUNNERS:
        for name in claimed(ROOT / path):
            found.setdefault(name, []).append(path)
    return found


def test_every_python_block_is_run_or_marked() -> None:
    runs = _runs()
    unaccounted = [
        f"docs/{b.page} line {b.line}"
        for b in blocks()
        if b.page not in WHOLE_PAGES and b.name not in runs and b.not_run is None
    ]
    assert not unaccounted, (
        "Python blocks no test runs: run each in a test of RUNNERS (run_block) or mark it with "
        f"'<!-- not run: <reason> -->' on the line before its fence: {unaccounted}"
    )


def test_a_run_block_names_a_block_that_is_not_marked() -> None:
    names = {b.name: b for b in blocks()}
    for name, files in _runs().items():
        assert name in names, f"{files} run {name}, which docs/ does not have"
        assert names[name].not_run is None, f"{name} is run by {files} and marked not run"
        assert names[name].page not in WHOLE_PAGES
    tox = (ROOT / "tox.ini").read_text()
    for path, env in RUNNERS.items():
        section = tox.split(f"[testenv:{env}]", 1)[1].split("\n[", 1)[0]
        runs = section.split("commands =", 1)[-1].split()
        folders = [str(folder) for folder in Path(path).parents][:-1]  # (not ".")
        assert path in runs or any(f in runs for f in folders), f"tox -e {env} does not run {path}"


def test_a_comment_before_a_block_is_the_marker_with_a_reason() -> None:
    wrong = [f"docs/{b.page} line {b.line}: {b.comment}" for b in blocks() if b.comment and b.not_run is None]
    assert not wrong, f"write the marker as '<!-- not run: <reason> -->': {wrong}"


def test_whole_pages_are_read_by_their_test() -> None:
    for page, test in WHOLE_PAGES.items():
        assert f'"docs" / "{page}"' in (ROOT / test).read_text()


def test_the_block_reader_sees_markers_and_numbers_blocks(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n```python\nx = 1\n```\n\n<!-- not run: needs a GPU -->\n```python\ny = 2\n```\n"
        "<!-- not-run -->\n\n```python\nz = 3\n```\n```bash\nls\n```\n"
    )
    found = page_blocks(page)
    assert [(b.index, b.line, b.code, b.not_run) for b in found] == [
        (1, 3, "x = 1\n", None),
        (2, 8, "y = 2\n", "needs a GPU"),
        (3, 13, "z = 3\n", None),
    ]
    assert found[2].comment == "<!-- not-run -->"
    assert isinstance(found[0], Block)


def test_a_swap_that_no_longer_matches_fails() -> None:
    with pytest.raises(AssertionError, match="no longer says"):
        run_block("algorithms.md:1", {"tether": tether}, {"a text the page does not have": ""})


# -- the blocks that need no torch ---------------------------------------------------------------------------


def _ask(question: str) -> str:
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}])
    return reply.choices[0].message.content or ""


def _sum_of(request: dict[str, Any]) -> Any:
    a, b = map(int, re.findall(r"\d+", str(request["messages"][-1]["content"]))[:2])
    return text(str(a + b))


@pytest.fixture
def model() -> Iterator[FakeLLM]:
    """The policy's model: answers the sum of the first two numbers in the last message."""
    with FakeLLM(handler=_sum_of) as llm:
        yield llm


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # run folders land under runs/ here
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def test_algorithms_probe_trains_through_fit(model: FakeLLM) -> None:
    ns = run_block("algorithms.md:1", {"tether": tether})
    agent = tether.wrap(_ask, reward=lambda task, out: float(out == "5"))
    trainer = tether.Trainer(model=model.base_url, algorithm=ns["Probe"](), progress=False)
    result = trainer.fit(agent, train=["What is 2+3?"], val=["What is 1+4?"])
    assert [(h["kind"], h["reward"]) for h in result.history if h["kind"] == "train"] == [("train", 1.0)]
    assert (result.run_dir / "metrics.jsonl").exists()


def test_judge_and_majority_vote_are_built_as_written() -> None:
    ns = run_block("judge.md:1", {"tether": tether})
    vote = ns["reward"]
    assert isinstance(vote, tether.MajorityVote)
    assert vote.extract("the answer is 42") == "42"


def test_the_reward_forms_score_a_dev_run(model: FakeLLM) -> None:
    def planner_then_writer(task: str) -> str:
        with agent_scope("planner"):
            _ask(task)
        with agent_scope("writer"):
            return _ask(task)

    with FakeLLM(handler=judge_handler(lambda task, attempt: 0.75)) as judge:
        ns = run_block("judge.md:2", {"tether": tether, "url": judge.base_url, "my_fn": lambda task, out: 0.5})
        agent = tether.wrap(planner_then_writer, reward=ns["reward"])
        report = tether.Trainer(model=model.base_url).dev(agent, ["What is 2+3?"])
        assert judge.chat_requests, "the writer's Judge asked the judge"
    assert report.metrics()["succeeded"] == 1.0
    # the mapping's rule: each sub-agent credited with its own value, the rollout's reward their mean
    assert report.metrics()["mean_reward"] == pytest.approx((0.75 + 0.5) / 2)


def test_a_policy_map_shows_each_calls_policy_in_dev(model: FakeLLM) -> None:
    def graph(task: str) -> str:
        for node in ("write_query", "check_query"):
            with agent_scope(node):
                answer = _ask(task)
        return answer

    ns = run_block("policies.md:1", {"tether": tether, "graph": graph, "my_reward": lambda task, out: 1.0})
    report = tether.Trainer(model=model.base_url).dev(ns["agent"], ["What is 2+3?"])
    shown = str(report)
    assert report.metrics()["succeeded"] == 1.0
    assert "writer" in shown and "checker" in shown, shown


def test_a_passthrough_judge_keeps_its_own_url(model: FakeLLM) -> None:
    with FakeLLM([text("CORRECT")]) as judge:
        ns = run_block(
            "wrap.md:2",
            {"tether": tether, "OpenAI": openai.OpenAI},
            {'"https://api.openai.com/v1"': repr(judge.base_url)},
        )
        report = tether.Trainer(model=model.base_url).dev(ns["agent"], ["What is 20+22?"])
        assert len(judge.chat_requests) == 1  # the judge's call went to the judge, not the policy
    assert report.metrics()["mean_reward"] == 1.0
    assert "passthrough" in str(report)
    assert len(model.chat_requests) == 1  # the policy's call, through the proxy


def test_an_otlp_export_is_built_as_written() -> None:
    ns = run_block("otel.md:1", {"tether": tether})
    assert ns["trainer"].export.endpoint == "http://127.0.0.1:4318"


def test_ray_runners_are_built_as_written() -> None:
    ns = run_block("scale-out.md:2", {"tether": tether})
    assert ns["trainer"].runners.n == 8 and ns["trainer"].store == "postgresql://tether@db-host/tether"


@pytest.fixture
def served(model: FakeLLM) -> Iterator[str]:
    """``tether serve <the fake LLM> --port 0`` as a real process: the base URL it printed."""
    command = [sys.executable, "-c", "from tether.cli import main; main()", "serve", model.base_url, "--port", "0"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("tether serve: ") and " at http://127.0.0.1:" in line, line + process.stdout.read()
        yield line.split(" at ", 1)[1].strip()
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


def test_the_served_models_client_is_the_agents_only_change(served: str) -> None:
    ns = run_block("serve.md:1", {"OpenAI": openai.OpenAI}, {'"http://127.0.0.1:8000/v1"': repr(served)})
    reply = ns["client"].chat.completions.create(model="m", messages=[{"role": "user", "content": "2 and 3"}])
    assert reply.choices[0].message.content == "5"
    assert block("serve.md:1").code.count("8000") == 1  # the port `tether serve` binds by default (its --help)
