"""Issue 37 item 8: ``report_to="mlflow"`` works without a tracking server, on MLflow's default store and on a
``file://`` store (``mlflow-skinny`` 3 can open neither by itself: its default is a SQLite database it lacks the
packages for, and its file store needs an opt-in), and a server that cannot be reached stops the run in seconds
naming it (MLflow's own retries blocked ``fit`` for ~250 s)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from report_readers import mlflow_curves

from tether.training.run.report import _mlflow_uri, reporting
from tether.training.run.run_dir import RunDir


def _log_two_steps(run_root: Path) -> None:
    run = RunDir.create(run_root, "r1")
    with reporting("mlflow", run, {"model": "embedded"}):
        run.log({"kind": "train", "step": 1, "reward": 0.25})
        run.log({"kind": "train", "step": 2, "reward": 0.75})


def test_the_default_store_works_without_a_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "tether-default")
    monkeypatch.chdir(tmp_path)
    uri = _mlflow_uri()
    _log_two_steps(tmp_path / "runs")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # (to read it back)
    info, curves = mlflow_curves(uri, "tether-default")
    assert info["run_name"] == "r1" and info["model"] == "embedded" and info["status"] == "FINISHED"
    assert curves["train/reward"] == {1: 0.25, 2: 0.75}


def test_a_file_store_works_without_the_opt_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "tether-file")
    _log_two_steps(tmp_path / "runs")
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ  # set only while the store was made
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    _, curves = mlflow_curves(uri, "tether-file")
    assert curves["train/reward"] == {1: 0.25, 2: 0.75}


def test_an_unreachable_server_fails_fast_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    started = time.monotonic()
    with pytest.raises(
        ConnectionError, match=rf"MLflow tracking server {uri} \(MLFLOW_TRACKING_URI\) did not answer"
    ):
        _log_two_steps(tmp_path / "runs")
    assert time.monotonic() - started < 15
