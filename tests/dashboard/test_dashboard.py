"""The dashboard in a real browser (Chromium, Playwright) against runs made by real tether code (conftest):
the runs and their curves (live while metrics are written), a rollout's trace tree with sub-agents, tool
results, rewards and transitions, the filters, paging through 10⁵ rollouts, resources with APO scores, and the
token rule. Each test saves a screenshot to the artifacts folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import BETTER_HINT, BIG, Served

from tether.dashboard.sources import Sources
from tether.training.run.run_dir import RunDir

expect = pytest.importorskip(
    "playwright.sync_api", reason="the dashboard tests need playwright (tox -e dashboard)"
).expect


TETHER = [sys.executable, "-c", "from tether.cli import main; main()"]


def _shot(page: Any, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
    # nothing wider than the window: no horizontal scroll bar at laptop width
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), f"{name}: overflows"


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_runs_and_the_apo_curve(page: Any, dashboard: Served, artifacts: Path) -> None:
    page.goto(dashboard.url)
    expect(page.locator(".source-list")).to_contain_text("apo")
    expect(page.locator(".source-list")).to_contain_text("concierge")
    page.locator(".source-list a", has_text="apo").click()
    expect(page.locator("h1")).to_have_text("apo")
    expect(page.locator(".stat", has_text="Held-out accuracy")).to_contain_text("100.0 %")
    chart = page.locator("svg.chart")
    expect(chart).to_be_visible()
    assert chart.locator("path.series").count() >= 1
    assert chart.locator("circle").count() == 3  # rounds 0, 1, 2 of the APO search
    _shot(page, artifacts, "overview_apo")


def test_a_rollout_as_a_tree(page: Any, dashboard: Served, artifacts: Path) -> None:
    page.goto(dashboard.url + "#/s/concierge/rollouts?mode=train&status=succeeded&sort=reward_desc")
    rows = page.locator("table.rows tbody tr.clickable")
    expect(rows.first).to_be_visible()
    expect(page.locator("table.rows tbody")).to_contain_text("triage")
    expect(page.locator("table.rows tbody")).to_contain_text("book_meeting")
    _shot(page, artifacts, "rollouts")
    rows.first.click()

    tree = page.locator(".tree")
    expect(tree).to_be_visible()
    groups = page.locator(".agent-group")
    expect(groups).to_have_count(2)
    assert [g.get_attribute("data-agent") for g in groups.all()] == ["triage", "book_meeting"]
    tool = page.locator('.node[data-type="tool"]').first
    expect(tool.locator(".node-title")).to_have_text("find_rooms")
    expect(tool.locator(".node-preview")).to_contain_text('"room"')  # the tool's result
    expect(page.locator('.node[data-type="reward"]')).to_contain_text("triaged")

    llm = page.locator('.agent-group[data-agent="book_meeting"] .node[data-type="llm"]').first
    llm.locator(".node-row").first.click()
    body = llm.locator(".node-body").first
    expect(body).to_contain_text("Messages (2)")
    expect(body).to_contain_text("You book meeting rooms in the")
    tokens = body.locator("details.fold", has_text="Response token ids and logprobs")
    tokens.locator("summary").click()
    expect(tokens.locator(".tok").first).to_contain_text("-0.5")  # the fake LLM's logprob per token

    transitions = page.locator(".card", has_text="Transitions").locator("tbody tr")
    expect(transitions).to_have_count(3)  # triage, find_rooms, book_room
    first, second = transitions.nth(0), transitions.nth(1)
    expect(first).to_contain_text("triage")
    expect(first).to_contain_text("frozen")  # optimize=["book_meeting"]
    expect(second).to_contain_text("trainable")
    advantage = second.locator("td").nth(5).inner_text()
    assert re.fullmatch(r"-?\d+(\.\d+)?", advantage), advantage  # group-relative, from the train batch
    _shot(page, artifacts, "rollout")  # the README's docs/dashboard.png


def test_back_link_takes_only_a_route_of_the_page(page: Any, dashboard: Served) -> None:
    """Issue 26 item 10: ``?back=javascript:...`` became the crumb's href (only the CSP stopped it)."""
    page.goto(dashboard.url + "#/s/concierge/rollouts")
    rows = page.locator("table.rows tbody tr.clickable")
    expect(rows.first).to_be_visible()
    rows.first.click()
    crumb = page.locator(".crumbs a")
    expect(crumb).to_be_visible()
    good = crumb.get_attribute("href")
    assert good and good.startswith("#/s/concierge/rollouts")
    rollout = page.url.split("#", 1)[1].split("?", 1)[0]
    for bad in ("javascript:alert(1)", "https://attacker.example/", "//attacker.example"):
        page.goto("about:blank")  # a fresh load: the crumb checked below is the new page's
        page.goto(dashboard.url + "#" + rollout + "?back=" + urllib.parse.quote(bad, safe=""))
        expect(page.locator("h1.mono")).to_be_visible()
        assert page.locator(".crumbs a").get_attribute("href") == "#/s/concierge/rollouts"


def test_filters_and_search(page: Any, dashboard: Served, artifacts: Path) -> None:
    page.goto(dashboard.url + "#/s/concierge/rollouts")
    chip = page.locator('.chip[data-status="failed"]')
    failed = int(chip.locator(".count").inner_text().replace(",", ""))
    assert failed >= 1  # triage escalated some requests
    chip.click()
    expect(page.locator("table.rows tbody tr.clickable")).to_have_count(failed)
    for status in page.locator("table.rows tbody .pill").all_inner_texts():
        assert status == "failed"
    expect(page.locator("table.rows tbody")).to_contain_text("triage escalated the request")

    page.locator('.chip[data-status="all"]').click()
    expect(page.locator('.chip[data-status="all"]')).to_have_class(re.compile("active"))
    page.fill('input[name="agent"]', "book_meeting")
    page.press('input[name="agent"]', "Enter")
    expect(page.locator(".pager-info")).to_contain_text("for sub-agent “book_meeting”")
    shown = page.locator("table.rows tbody tr.clickable")
    expect(shown.first).to_be_visible()
    for row in shown.all():
        assert "book_meeting" in row.inner_text()
    page.goto(dashboard.url + "#/s/concierge/rollouts?min_reward=1")
    expect(page.locator('input[name="min_reward"]')).to_have_value("1")
    rewards = page.locator("table.rows tbody tr.clickable td:nth-child(3)").all_inner_texts()
    assert rewards and all(r.strip() == "1" for r in rewards)

    page.goto(dashboard.url + "#/s/concierge/rollouts")
    expect(page.locator('input[name="min_reward"]')).to_have_value("")
    wanted = page.locator("table.rows tbody tr.clickable").nth(3).get_attribute("data-id")
    assert wanted is not None
    page.fill('input[name="q"]', wanted[3:11])
    page.press('input[name="q"]', "Enter")
    expect(page.locator("table.rows tbody tr.clickable")).to_have_count(1)
    expect(page.locator("table.rows tbody")).to_contain_text(wanted)
    _shot(page, artifacts, "search")


def test_paging_through_many_rollouts(page: Any, big_store: str, artifacts: Path) -> None:
    served = Served(Sources(big_store, None))
    sizes: list[int] = []
    page.on("response", lambda r: sizes.append(len(r.body())) if "/api/rollouts" in r.url else None)
    try:
        page.goto(served.url + "#/s/" + big_store.replace("/", "%2F") + "/rollouts")
        info = page.locator(".pager-info")
        expect(info).to_have_text(f"Showing 1–50 of {BIG:,}", timeout=60_000)
        expect(page.locator("table.rows tbody tr.clickable")).to_have_count(50)
        first_id = page.locator("table.rows tbody tr.clickable").first.get_attribute("data-id")
        page.get_by_role("button", name="Next ›").click()
        expect(info).to_have_text(f"Showing 51–100 of {BIG:,}")
        assert page.locator("table.rows tbody tr.clickable").first.get_attribute("data-id") != first_id
        page.get_by_role("button", name="Last »").click()
        expect(info).to_have_text(f"Showing {BIG - 49:,}–{BIG:,} of {BIG:,}")
        page.fill('input[aria-label="page"]', "1000")
        page.press('input[aria-label="page"]', "Enter")
        expect(info).to_have_text(f"Showing {999 * 50 + 1:,}–{1000 * 50:,} of {BIG:,}")
        page.locator('.chip[data-status="failed"]').click()
        failed = int(page.locator('.chip[data-status="failed"] .count').inner_text().replace(",", ""))
        assert 0.1 * BIG < failed < 0.2 * BIG
        expect(info).to_have_text(f"Showing 1–50 of {failed:,}")
        _shot(page, artifacts, "rollouts_100k")
    finally:
        served.stop()
    assert sizes and max(sizes) < 100_000  # one page of rows, never the store


def test_curves_update_while_metrics_are_written(page: Any, dashboard: Served, runs: Path) -> None:
    run = RunDir.create(runs, "live")
    run.log({"kind": "train", "step": 1, "reward": 0.2, "rollouts": 16})
    page.goto(dashboard.url + "#/s/live/overview")
    chart = page.locator("svg.chart")
    expect(chart.locator("circle")).to_have_count(1)
    for step, reward in ((2, 0.4), (3, 0.55)):
        run.log({"kind": "train", "step": step, "reward": reward, "rollouts": 16})
    run.log({"kind": "eval", "step": 3, "greedy_accuracy": 0.5})
    expect(chart.locator("circle")).to_have_count(4, timeout=15_000)  # polled, no reload
    expect(page.locator(".stat", has_text="Train reward")).to_contain_text("0.55")


def test_resources_with_apo_scores(page: Any, dashboard: Served, artifacts: Path) -> None:
    page.goto(dashboard.url + "#/s/apo/resources")
    cards = page.locator(".version-card")
    expect(cards.first).to_be_visible()
    text = page.locator("main").inner_text()
    assert "APO" in text and "in beam" in text and "score" in text
    assert BETTER_HINT.strip() in text  # the rewritten prompt is a version of its own
    llm = page.locator("dt:text-is('LLM') + dd").all_inner_texts()
    assert llm and not any(t.strip().endswith(" at") for t in llm), llm  # a version names no URL: none shown
    _shot(page, artifacts, "resources")


def test_the_token_rule(page: Any, browser: Any, runs: Path) -> None:
    served = Served(Sources(None, runs), token="s3cret")
    try:
        status, body = _get(served.url + "api/sources")
        assert status == 401 and "?token=" in body["error"]["message"]
        status, body = _get(served.url + "api/sources", {"Authorization": "Bearer s3cret"})
        assert status == 200 and any(s["name"] == "apo" for s in body["sources"])
        page.goto(served.url + "?token=s3cret")  # the page keeps it in a cookie and drops it from the address
        expect(page.locator(".source-list")).to_contain_text("apo")
        assert "token" not in page.url
    finally:
        served.stop()


def test_the_store_server_serves_the_pages(page: Any, runs: Path) -> None:
    """``tether store serve`` with a token: the store API wants the bearer token, the pages their cookie."""
    command = [*TETHER, "store", "serve", "--port", "0", "--token", "t0k"]
    command += ["--store", f"sqlite:///{runs / 'concierge' / 'store.db'}"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:"), line
        assert _get(url + "/v1/health")[0] == 401
        assert _get(url + "/v1/health", {"Authorization": "Bearer t0k"})[0] == 200
        assert _get(url + "/dashboard/api/sources")[0] == 401
        page.goto(url + "/dashboard/?token=t0k")
        expect(page.locator("table.rows tbody tr.clickable").first).to_be_visible(timeout=20_000)
        expect(page.locator("table.rows tbody")).to_contain_text("book_meeting")
    finally:
        process.terminate()
        process.wait(10)


def test_cli_dashboard_serves(runs: Path) -> None:
    command = [*TETHER, "dashboard", "--runs", str(runs), "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert f"runs in {runs}/" in line, line
        url = line.strip().rsplit(" ", 1)[-1]
        status, body = _get(url + "api/sources")
        assert status == 200 and {"apo", "concierge"} <= {s["name"] for s in body["sources"]}
    finally:
        process.terminate()
        process.wait(10)
    refused = subprocess.run(
        [*TETHER, "dashboard", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "TETHER_STORE_TOKEN"},
    )
    assert refused.returncode != 0 and "without a token" in refused.stderr
