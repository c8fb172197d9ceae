"""The docs' tables and lists that restate code are checked against it: the plugin hooks of docs/plugins.md
against ``tether.plugin.hookspecs``, the ``model=`` strings of docs/models.md and docs/wrap.md against what
``tether.models.check_model`` takes (its own error messages list the forms and the options), and every
``tether <command> --flag`` the docs, the README and the examples' READMEs write against the command's options
(click's, and ``tether demo --help``'s), each command's options documented on its page with the defaults the
code has. (docs/development.md's tox table: ``test_docs.py``.)"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

import tether.plugin.hookspecs as hookspecs
from tether.cli import main
from tether.models import check_model

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"

# -- plugin hooks -------------------------------------------------------------------------------------------


def _hookspecs() -> dict[str, list[str]]:
    """hook name -> its parameter names, from the module the docs name as the contract."""
    return {
        name: list(inspect.signature(func).parameters)
        for name, func in vars(hookspecs).items()
        if inspect.isfunction(func) and hasattr(func, "tether_spec")
    }


def test_the_plugin_page_documents_every_hook_with_its_parameters() -> None:
    page = (DOCS / "plugins.md").read_text()
    assert "`core/tether/plugin/hookspecs.py`" in page and Path(hookspecs.__file__) == (
        ROOT / "core" / "tether" / "plugin" / "hookspecs.py"
    ), "docs/plugins.md names the module that holds the hooks"
    documented = {
        name: [p.strip() for p in params.split(",") if p.strip()]
        for name, params in re.findall(r"^## `(\w+)\(([^)]*)\)`$", page, re.M)
    }
    specs = _hookspecs()
    assert specs, "no hookspecs found"
    assert documented == specs, f"docs/plugins.md's hooks {documented} != hookspecs.py's {specs}"


def test_first_result_hooks_say_so() -> None:
    page = (DOCS / "plugins.md").read_text()
    for name, func in vars(hookspecs).items():
        if inspect.isfunction(func) and getattr(func, "tether_spec", {}).get("firstresult"):
            section = page.split(f"## `{name}(", 1)[1].split("\n## ", 1)[0]
            assert "first non-None answer wins" in section, f"docs/plugins.md: {name} is firstresult"


# -- model= strings -----------------------------------------------------------------------------------------


def _refusal(model: str) -> str:
    with pytest.raises(ValueError) as refused:
        check_model(model)
    return str(refused.value)


def _forms() -> list[str]:
    """The ``model=`` forms the code lists when it refuses an unknown one."""
    return re.findall(r'"([^"]+)"', _refusal("no-such-model").split(": use ", 1)[1])


def _options() -> list[str]:
    """The options ``hf:`` takes after ``?``, as its refusal of an unknown option lists them."""
    return re.findall(r"(\w+)=<\.\.\.>", _refusal("hf:x?no_such_option=1"))


def _example(form: str) -> str:
    """A form with its placeholders filled in."""
    return (
        re.sub(r"<[^>]+>|…", "x", form)
        .replace("http(s)", "https")
        .replace("host:port", "host:8000")
        .replace("=N", "=1")
    )


def test_the_code_lists_the_forms_and_options_these_tests_read() -> None:
    assert {"embedded", "smollm2"} <= set(_forms()) and len(_forms()) >= 5
    assert "threads" in _options()
    for form in _forms():
        check_model(_example(form))  # every form the refusal lists is taken


@pytest.mark.parametrize("page", ["models.md", "wrap.md"])
def test_every_model_form_is_documented(page: str) -> None:
    text = (DOCS / page).read_text()
    missing = [form for form in _forms() if f'`"{form.split("<")[0]}' not in text]
    assert not missing, f"docs/{page} does not list model={missing}"


@pytest.mark.parametrize("page", ["models.md", "wrap.md"])
def test_every_documented_model_string_is_taken(page: str) -> None:
    text = (DOCS / page).read_text()
    documented = re.findall(r'`"((?:embedded|smollm2|hf:|vllm:|https?:|http\(s\))[^"`]*)"`', text)
    assert len(documented) >= 5
    for model in documented:
        example = _example(model)
        if "device=cuda" in example:
            continue  # refused on a machine without a GPU, by design
        check_model(example)


def test_every_model_option_is_documented_and_every_documented_one_exists() -> None:
    models = (DOCS / "models.md").read_text()
    missing = [option for option in _options() if f"{option}=" not in models]
    assert not missing, f"docs/models.md does not document the model options {missing}"
    written = {
        key
        for page in DOCS.glob("*.md")
        for query in re.findall(r"(?:hf:[^\s`\"?]*|smollm2)\?([\w=&:.<>-]+)", page.read_text())
        for key in re.findall(r"(?:^|&)(\w+)=", query)
    }
    assert written, "the docs show no model option"
    assert written <= set(_options()), f"the docs name model options the code lacks: {written - set(_options())}"


# -- CLI flags ----------------------------------------------------------------------------------------------

#: the page that documents each command's options
PAGES = {
    "serve": "docs/serve.md",
    "store serve": "docs/store.md",
    "dashboard": "docs/dashboard.md",
    "merge": "docs/gpus.md",
    "import": "docs/otel.md",
}
_MENTION = re.compile(r"\btether (store serve|serve|dashboard|merge|import|demo|plugins)((?: +[^\s`|#]+)*)")


def _commands() -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name, command in main.commands.items():
        if isinstance(command, click.Group):
            found.update({f"{name} {sub}": c for sub, c in command.commands.items()})
        else:
            found[name] = command
    return found


def _flags(command: click.Command) -> dict[str, click.Option]:
    return {
        opt: param
        for param in command.params
        if isinstance(param, click.Option)
        for opt in param.opts
        if opt.startswith("--") and opt != "--help"
    }


def _demo_flags() -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", "from tether.cli import main; main()", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", done.stdout)) | {"--help-example"}


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]


def test_every_command_is_documented_and_every_documented_page_exists() -> None:
    text = "\n".join(page.read_text() for page in _pages())
    missing = [name for name in _commands() if f"tether {name}" not in text]
    assert not missing, f"commands no page mentions: {missing}"
    assert set(PAGES) <= set(_commands()), f"PAGES names commands tether lacks: {set(PAGES) - set(_commands())}"


def test_every_flag_the_docs_write_is_one_the_command_has() -> None:
    commands = _commands()
    demo = _demo_flags()
    wrong = []
    for page in _pages():
        for name, rest in _MENTION.findall(page.read_text()):
            has = demo if name == "demo" else set(_flags(commands[name]))
            written = re.findall(r"--[a-z][\w-]*", rest)
            wrong += [f"{page.relative_to(ROOT)}: tether {name} {flag}" for flag in written if flag not in has]
    assert not wrong, f"flags the commands do not have: {wrong}"


@pytest.mark.parametrize("command", sorted(PAGES))
def test_each_commands_page_documents_its_options_and_their_defaults(command: str) -> None:
    page = (ROOT / PAGES[command]).read_text()
    flags = _flags(_commands()[command])
    missing = [flag for flag in flags if f"{flag}" not in page]
    assert not missing, f"{PAGES[command]} does not document tether {command} {missing}"
    for flag, default in re.findall(r"`(--[a-z][\w-]*)`[^`(\n]*\(default `?([^`),;]+)`?", page):
        assert flag in flags, f"{PAGES[command]}: tether {command} has no {flag}"
        assert str(flags[flag].default) == default.strip(), f"{PAGES[command]}: {flag}'s default is {default}"
