"""The command line's help and errors: ``tether demo --help`` lists the demo's flags (without the demo's
dependencies), the examples' scripts accept exact flag names only and describe every flag, bad input to
``demo``, ``dashboard`` and ``import`` ends in one line naming the problem (no traceback), ``store serve
--help`` names PostgreSQL, and docs/store.md lists every HTTP route the store server serves."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from tether.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*/train.py"))


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def _one_line_error(code: int, output: str) -> str:
    assert code != 0 and "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, output
    return errors[0]


def test_demo_help_lists_the_demos_flags_with_their_help() -> None:
    code, out = _run("demo", "--help")
    assert code == 0, out
    for flag, words in (("--steps", "GRPO steps"), ("--quick", "about a minute"), ("--run-dir", "metrics")):
        assert flag in out and words in out, out


def test_the_demo_reads_its_model_flag_whatever_its_arguments() -> None:
    from tether.cli import _wants_smollm2

    assert not _wants_smollm2([])  # plain `tether demo`, the README's first command (this raised ValueError)
    assert not _wants_smollm2(["--model"]) and not _wants_smollm2(["--model", "embedded"])
    assert _wants_smollm2(["--model", "smollm2"]) and _wants_smollm2(["--steps", "3", "--model=smollm2"])


def _calc_train() -> ModuleType:
    path = ROOT / "examples" / "calc_autogen" / "train.py"
    spec = importlib.util.spec_from_file_location("calc_autogen_train", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_mistyped_flag_is_refused_not_expanded(capsys: pytest.CaptureFixture[str]) -> None:
    train = _calc_train()
    with pytest.raises(SystemExit) as exited:
        train.main(["--step", "1"])  # argparse's prefix matching once made this --steps 1: a full run
    assert exited.value.code == 2
    assert "unrecognized arguments: --step 1" in capsys.readouterr().err


def test_a_run_dir_that_cannot_be_made_is_one_line() -> None:
    train = _calc_train()
    with pytest.raises(SystemExit) as exited:
        train.main(["--run-dir", "/dev/null/x"])
    message = str(exited.value.code)
    assert message.startswith("error: --run-dir /dev/null/x: cannot create it") and "\n" not in message


def test_quick_changes_only_what_was_not_given() -> None:
    train = _calc_train()
    assert train.QUICK["steps"] < 10 and train.QUICK["n_train"] <= 256
    quick = train.parse_settings(["--quick"])
    assert (quick.steps, quick.group_size, quick.lr) == (train.QUICK["steps"], train.QUICK["group_size"], 5e-4)
    # a flag given wins, even at its default value (the preset used to override it then)
    given = train.parse_settings(["--quick", "--group-size", "8", "--steps", "3"])
    assert (given.group_size, given.steps, given.n_train) == (8, 3, train.QUICK["n_train"])
    smol = train.parse_settings(["--model", "smollm2", "--quick", "--micro-batch", "32"])
    assert smol.micro_batch == 32 and smol.sft_lr == train.SMOLLM2["sft_lr"] and smol.steps == train.QUICK["steps"]


def test_lora_flags_without_smollm2_are_refused_not_ignored(capsys: pytest.CaptureFixture[str]) -> None:
    train = _calc_train()
    with pytest.raises(SystemExit) as exited:
        train.parse_settings(["--lora-layers", "4", "--rank", "8"])
    assert exited.value.code == 2
    assert "--lora-layers, --rank: LoRA settings apply to --model smollm2" in capsys.readouterr().err
    assert train.parse_settings(["--model", "smollm2", "--lora-layers", "4"]).lora_layers == 4


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_example_flag_has_help_and_an_exact_name(script: Path) -> None:
    tree = ast.parse(script.read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    parsers = [c for c in calls if c.func.attr == "ArgumentParser"]  # type: ignore[union-attr]
    assert parsers, script
    for parser in parsers:
        abbrev = {k.arg: k.value for k in parser.keywords}.get("allow_abbrev")
        assert isinstance(abbrev, ast.Constant) and abbrev.value is False, f"{script}: allow_abbrev=False"
    for call in (c for c in calls if c.func.attr == "add_argument"):  # type: ignore[union-attr]
        flag = ast.literal_eval(call.args[0]) if call.args else "?"
        assert any(k.arg == "help" for k in call.keywords), f"{script}: {flag} has no help text"


def test_dashboard_with_a_port_out_of_range_is_one_line() -> None:
    line = _one_line_error(*_run("dashboard", "--port", "99999"))
    assert "99999 is not in the range" in line


BAD_FILES = {
    "empty-array.json": b"[1, 2]",
    "text.json": b"not json at all",
    "binary.json": b"\xff\xfe\x00",
    "wrong-type.json": b'{"resourceSpans": 5}',
    "wrong-nesting.json": b'{"resourceSpans": [{"scopeSpans": 3}]}',
    "bad-attributes.json": b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "AAAAAAAAAAAAAAAAAAAAAA==",'
    b' "spanId": "AAAAAAAAAAA=", "attributes": 7}]}]}]}',
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_import_of_a_bad_file_is_one_line_naming_it(name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_bytes(BAD_FILES[name])
    line = _one_line_error(*_run("import", str(path), "--store", "memory:"))
    assert name in line or "OTLP" in line, line


def test_store_serve_help_names_postgresql() -> None:
    code, out = _run("store", "serve", "--help")
    assert code == 0 and "postgresql://" in out


def test_the_store_servers_routes_are_documented() -> None:
    from tether.store.http import _routes

    doc = (ROOT / "docs" / "store.md").read_text()
    for method, path, _ in _routes.ROUTES:
        shown = re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)
        assert re.search(rf"\| {method} \|[^\n]*`{re.escape(shown)}`", doc), (
            f"{method} {shown} not in docs/store.md"
        )
    assert "/v1/traces" in doc and "/dashboard/" in doc
