"""``Trainer(report_to=...)``: the rows of ``metrics.jsonl`` sent also to TensorBoard, Weights & Biases or MLflow.

Each row the run folder logs (``RunDir.log``: ``kind``, ``step`` and the metrics of a training step, an
evaluation, an APO round...) goes to every sink named in ``report_to``, as scalars named ``<kind>/<metric>``
(``train/reward``, ``eval/greedy_accuracy``, ``train/reward/<target>``, ``train/loss/<policy>``) at the row's
``step``. Values that are not numbers (candidate ids, beams) stay in ``metrics.jsonl`` only.

- ``tensorboard`` (``pip install "tether[tensorboard]"``): event files in ``runs/<name>/tensorboard/``, written
  with TensorBoard's own event writer (no TensorFlow or torch).
- ``wandb`` (``pip install "tether[wandb]"``): a W&B run named after the run folder, its files under
  ``runs/<name>/wandb/``; W&B's own settings apply (``WANDB_PROJECT``, default ``tether``; ``WANDB_MODE=offline``).
- ``mlflow`` (``pip install "tether[mlflow]"``): an MLflow run named after the run folder in the experiment
  ``MLFLOW_EXPERIMENT_NAME`` (default ``tether``) of the tracking store ``MLFLOW_TRACKING_URI``; names MLflow
  refuses have those characters replaced by ``_``. Unset, it is MLflow's default where MLflow can open it (its
  SQLite database needs the full ``mlflow``), else the file store ``./mlruns`` (what ``mlflow ui`` reads); a
  ``file:`` store is opened without MLflow 3's opt-in (``MLFLOW_ALLOW_FILE_STORE``); a tracking server
  (``http(s)://``) must answer within ``MLFLOW_PROBE_S`` (5 s) when the run starts, else the run stops naming it
  (MLflow's own retries would block it for minutes).

Nothing is imported until a run that asked for a sink starts; a sink whose package is missing is refused when the
``Trainer`` is made, with the ``pip install`` command that adds it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from tether.training.run.run_dir import RunDir

#: sink name -> (the module it needs, the extra that installs it)
SINKS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
}
#: row fields that say where a row belongs rather than what was measured
_NOT_METRICS = frozenset({"time", "step", "kind"})


class Sink(Protocol):
    def log(self, step: int, scalars: dict[str, float], wall_time: float) -> None: ...

    def close(self) -> None: ...


def check_report_to(report_to: str | Sequence[str] | None) -> tuple[str, ...]:
    """The sink names of ``report_to`` (``None`` or ``"none"``: none); ``ValueError`` for an unknown name and
    ``ImportError`` naming the ``pip install`` command for a sink whose package is missing."""
    if report_to is None:
        return ()
    if isinstance(report_to, str):
        names: list[Any] = [report_to]
    elif isinstance(report_to, list | tuple | set | frozenset):
        names = list(report_to)
    else:
        raise ValueError(f"report_to takes a sink name or a list of them ({', '.join(SINKS)}), got {report_to!r}")
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or name not in (*SINKS, "none"):
            raise ValueError(f"report_to={name!r} is not a sink: choose from {', '.join(SINKS)} (or 'none')")
        if name == "none" or name in out:
            continue
        module, extra = SINKS[name]
        if importlib.util.find_spec(module) is None:
            raise ImportError(f'report_to="{name}" needs {module}: pip install "tether[{extra}]"')
        out.append(name)
    return tuple(out)


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """A metrics row's numbers as ``<kind>/<metric>`` scalars (booleans as 0/1; text, lists and None dropped)."""
    kind = str(row.get("kind") or "metrics")
    return {
        f"{kind}/{key}": float(value)
        for key, value in row.items()
        if key not in _NOT_METRICS and isinstance(value, int | float)
    }


class Reporter:
    """The sinks of one run: ``log(row)`` sends a metrics row to each; ``close()`` ends their runs."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = list(sinks)

    def log(self, row: dict[str, Any]) -> None:
        values = scalars(row)
        if not values:
            return
        step = int(row.get("step") or 0)
        wall_time = float(row.get("time") or time.time())
        for sink in self.sinks:
            sink.log(step, values, wall_time)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


@contextlib.contextmanager
def reporting(
    report_to: str | Sequence[str] | None, run: RunDir, config: Mapping[str, Any] | None = None
) -> Iterator[Reporter | None]:
    """Open the sinks of ``report_to`` for ``run`` (named after its folder) as its ``reporter``, and close them
    when the block ends, however it ends. Yields None when there are none."""
    names = check_report_to(report_to)
    if not names:
        yield None
        return
    opened: list[Sink] = []
    try:
        for name in names:
            opened.append(_OPEN[name](run.path, dict(config or {})))
        run.reporter = Reporter(opened)
        yield run.reporter
    finally:
        run.reporter = None
        for sink in opened:
            sink.close()


# -- the sinks ------------------------------------------------------------------------------------------------


class _TensorBoard:
    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        self._writer = EventFileWriter(str(run_dir / "tensorboard"), flush_secs=10)

    def log(self, step: int, scalars: dict[str, float], wall_time: float) -> None:
        values = [self._summary.Value(tag=tag, simple_value=value) for tag, value in scalars.items()]
        self._writer.add_event(self._event(wall_time=wall_time, step=step, summary=self._summary(value=values)))

    def close(self) -> None:
        self._writer.close()


class _WandB:
    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        import wandb

        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or "tether",
            name=run_dir.name,
            dir=str(run_dir),
            config=config,
            reinit="create_new",
        )
        self._finished = False

    def log(self, step: int, scalars: dict[str, float], wall_time: float) -> None:
        self._run.log(scalars, step=step)

    def close(self) -> None:
        if not self._finished:
            self._finished = True
            self._run.finish()


#: what MLflow accepts in a metric name; anything else becomes "_"
_MLFLOW_NAME = re.compile(r"[^\w\-. /:]")


#: how long the MLflow tracking server has to answer when a run starts
MLFLOW_PROBE_S = 5.0


class _MLflow:
    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        from mlflow.tracking import MlflowClient

        uri = _mlflow_uri()
        with _file_store_allowed(uri):  # (the store is made, and kept by the client, in this block)
            self._client = MlflowClient(tracking_uri=uri)
            experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "tether"
            try:
                experiment = self._client.get_experiment_by_name(experiment_name)
            except ModuleNotFoundError as exc:  # mlflow-skinny without its database store's packages
                raise ImportError(
                    f"MLflow's tracking store {uri} needs {exc.name}: pip install mlflow, or set "
                    "MLFLOW_TRACKING_URI to a tracking server (http://...) or a folder (file:///path/mlruns)"
                ) from exc
            experiment_id = (
                experiment.experiment_id
                if experiment is not None
                else self._client.create_experiment(experiment_name)
            )
        self._run_id: str | None = self._client.create_run(experiment_id, run_name=run_dir.name).info.run_id
        for key, value in config.items():
            self._client.log_param(self._run_id, key, value)

    def log(self, step: int, scalars: dict[str, float], wall_time: float) -> None:
        from mlflow.entities import Metric

        if self._run_id is None:
            return
        stamp = int(wall_time * 1000)
        metrics = [Metric(_MLFLOW_NAME.sub("_", key), value, stamp, step) for key, value in scalars.items()]
        self._client.log_batch(self._run_id, metrics=metrics)

    def close(self) -> None:
        if self._run_id is not None:
            self._client.set_terminated(self._run_id)
            self._run_id = None


def _mlflow_uri() -> str:
    """The tracking URI to use: ``MLFLOW_TRACKING_URI`` (a server checked to answer), else MLflow's default when
    its packages can open it, else the file store ``./mlruns``."""
    given = os.environ.get("MLFLOW_TRACKING_URI")
    if given:
        if given.startswith(("http://", "https://")):
            _probe_mlflow(given)
        return given
    import mlflow

    default = str(mlflow.get_tracking_uri())
    if not default.startswith("sqlite:") or all(importlib.util.find_spec(m) for m in ("sqlalchemy", "alembic")):
        return default
    return (Path.cwd() / "mlruns").as_uri()  # mlflow-skinny: its default database needs the full mlflow


def _probe_mlflow(uri: str) -> None:
    """Refuse a tracking server that does not answer within ``MLFLOW_PROBE_S``: MLflow retries for minutes."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=MLFLOW_PROBE_S):
            return
    except urllib.error.HTTPError:
        return  # it answered
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConnectionError(
            f"report_to='mlflow': the MLflow tracking server {uri} (MLFLOW_TRACKING_URI) did not answer within "
            f"{MLFLOW_PROBE_S:g} s ({reason}): start it (mlflow server), fix the URI, or unset "
            "MLFLOW_TRACKING_URI to log to ./mlruns"
        ) from None


@contextlib.contextmanager
def _file_store_allowed(uri: str) -> Iterator[None]:
    """MLflow 3 opens a ``file:`` store only with ``MLFLOW_ALLOW_FILE_STORE``: set while the store is made."""
    if not uri.startswith("file:") or "MLFLOW_ALLOW_FILE_STORE" in os.environ:
        yield
        return
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)


_OPEN: dict[str, Any] = {"tensorboard": _TensorBoard, "wandb": _WandB, "mlflow": _MLflow}
