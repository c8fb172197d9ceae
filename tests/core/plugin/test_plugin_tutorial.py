"""docs/plugin-tutorial.md runs as written: its ``# file:`` blocks are written out, its other Python blocks run
in order against the fake LLM and print what the page says they print, its conformance test module passes the
adapter conformance suite, and its ``pyproject.toml`` and ``tox.ini`` snippets parse and name the plugin it
built. The plugin template (``plugins/_template``), filled in with the tutorial's framework, passes the suite
too."""

from __future__ import annotations

import ast
import configparser
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TUTORIAL = ROOT / "docs" / "plugin-tutorial.md"
TEMPLATE = ROOT / "plugins" / "_template"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
_FILE = re.compile(r"^# file: (\S+)\n")

# the plugin is not installed with an entry point in the test's venv: register it as the tutorial's "Try it" does
_CONFTEST = """
import tether
import tether_tinyagent

if "tinyagent" not in {p.name for p in tether.get_plugins().loaded()}:
    tether.get_plugins().register(tether_tinyagent, "tinyagent")
"""


def _blocks(language: str | None = None) -> list[tuple[str, str]]:
    found = [(m.group(1), m.group(2)) for m in _BLOCK.finditer(TUTORIAL.read_text())]
    return [b for b in found if language is None or b[0] == language]


def _write_files(into: Path) -> list[str]:
    written = []
    for _, code in _blocks("python"):
        name = _FILE.match(code)
        if name:
            path = into / name.group(1)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(code)
            written.append(name.group(1))
    return written


def _env(path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")]))
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    return env


def _run_conformance(where: Path) -> subprocess.CompletedProcess[str]:
    (where / "tests" / "plugins" / "tinyagent" / "conftest.py").write_text(_CONFTEST)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto",
         "--rootdir", str(where), "tests/plugins/tinyagent"],
        cwd=where, env=_env(where), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_blocks_are_what_the_tutorial_promises() -> None:
    languages = [language for language, _ in _blocks()]
    assert set(languages) <= {"python", "text", "toml", "ini"}, languages
    python = _blocks("python")
    assert all(ast.parse(code) for _, code in python)  # every Python block is Python
    files = [m.group(1) for _, code in python if (m := _FILE.match(code))]
    assert files == [
        "tinyagent.py",
        "calc_team.py",
        "tether_tinyagent/capture.py",
        "tether_tinyagent/adapter.py",
        "tether_tinyagent/__init__.py",
        "tests/plugins/tinyagent/test_tinyagent_conformance.py",
    ]


def test_the_tutorial_plugin_runs_and_prints_what_the_page_shows(tmp_path: Path) -> None:
    _write_files(tmp_path)
    scripts = [code for _, code in _blocks("python") if not _FILE.match(code)]
    assert len(scripts) == 1
    done = subprocess.run(
        [sys.executable, "-c", scripts[0]], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = TUTORIAL.read_text()
    after = text[text.index(scripts[0]) + len(scripts[0]) :]
    shown = _BLOCK.search(after)
    assert shown is not None and shown.group(1) == "text", "a text block after the script shows its output"
    assert done.stdout == shown.group(2), f"the script printed:\n{done.stdout}\nthe page shows:\n{shown.group(2)}"


def test_the_tutorial_plugin_passes_the_conformance_suite(tmp_path: Path) -> None:
    _write_files(tmp_path)
    done = _run_conformance(tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\b8 passed\b", done.stdout), done.stdout[-2000:]


def test_the_packaging_snippets_name_the_plugin() -> None:
    (toml,) = [code for _, code in _blocks("toml")]
    project = tomllib.loads(toml)
    init = next(code for _, code in _blocks("python") if code.startswith("# file: tether_tinyagent/__init__.py"))
    extra = re.search(r'^EXTRA = "(.+)"$', init, re.M)
    assert extra is not None
    assert extra.group(1) in project["project"]["optional-dependencies"]
    assert project["project"]["entry-points"]["tether"] == {"tinyagent": "tether_tinyagent"}
    assert "plugins/tinyagent" in project["tool"]["setuptools"]["packages"]["find"]["where"]
    assert "plugins/tinyagent" in project["tool"]["mypy"]["mypy_path"].split(":")
    (ini,) = [code for _, code in _blocks("ini")]
    tox = configparser.ConfigParser()
    tox.read_string(ini)
    env = tox["testenv:tinyagent"]
    assert extra.group(1) in env["extras"].split()
    assert "tests/plugins/tinyagent" in env["commands"]
    # and the real tox.ini writes its plugin envs the same way
    real = configparser.ConfigParser(interpolation=None)
    real.read(ROOT / "tox.ini")
    assert set(real["testenv:langgraph"]) >= set(env), "the tutorial's tox env has keys tox.ini's envs lack"


def test_the_template_filled_in_with_the_tutorials_framework_passes_the_suite(tmp_path: Path) -> None:
    _write_files(tmp_path)
    shutil.rmtree(tmp_path / "tether_tinyagent")  # the template's package replaces the tutorial's
    package = TEMPLATE / "tether_myframework"
    todos = 0
    for source in sorted(package.glob("*.py")):
        code = source.read_text()
        todos += code.count("TODO(framework)")
        filled = code.replace("tether_myframework", "tether_tinyagent").replace("myframework", "tinyagent")
        filled = filled.replace("MyFramework", "TinyAgent")
        target = tmp_path / "tether_tinyagent" / source.name
        target.parent.mkdir(exist_ok=True)
        target.write_text(filled)
    assert todos >= 4, "the template marks where the framework-specific parts go with TODO(framework)"
    done = _run_conformance(tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\b8 passed\b", done.stdout), done.stdout[-2000:]


@pytest.mark.parametrize("page", ["docs/plugins.md", "README.md"])
def test_the_tutorial_is_linked(page: str) -> None:
    assert "plugin-tutorial.md" in (ROOT / page).read_text()
