"""Reading back what each sink wrote, offline, with the sink's own reader where it has one: TensorBoard's
``EventAccumulator``, MLflow's ``MlflowClient`` on a ``file://`` store, and for W&B the records of the offline
run file (``run-<id>.wandb``: a ``:W&B`` header, then LevelDB-log blocks of ``Record`` protobufs; the SDK no
longer ships a Python reader). Each returns ``{tag: {step: value}}``."""

from __future__ import annotations

import json
import struct
from pathlib import Path

Curves = dict[str, dict[int, float]]

_WANDB_HEADER = 7  # b":W&B", a 2-byte magic number, a version byte
_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def tensorboard_curves(logdir: Path) -> Curves:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def mlflow_curves(tracking_uri: str, experiment: str) -> tuple[dict[str, str], Curves]:
    """The one run of ``experiment``: its tags and params, and its metrics' histories."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment!r}"
    (run,) = client.search_runs([found.experiment_id])
    info = {"run_name": run.info.run_name, "status": run.info.status, **run.data.params}
    curves = {
        key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)} for key in run.data.metrics
    }
    return info, curves


def wandb_records(run_file: Path) -> list[object]:
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    records, pending, offset = [], b"", _WANDB_HEADER
    while offset + 7 <= len(data):
        if _BLOCK - offset % _BLOCK < 7:  # a block's tail too short for a record header is padding
            offset += _BLOCK - offset % _BLOCK
            continue
        length, kind = struct.unpack_from("<HB", data, offset + 4)
        chunk = data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind == 0 and length == 0:
            break
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def wandb_curves(run_file: Path) -> tuple[dict[str, object], Curves]:
    """The run's name and config, and its history as curves."""
    info: dict[str, object] = {}
    curves: Curves = {}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")  # type: ignore[attr-defined]
        if kind == "run":
            info["name"] = record.run.display_name  # type: ignore[attr-defined]
            info.update({i.key: json.loads(i.value_json) for i in record.run.config.update})  # type: ignore[attr-defined]
        elif kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}  # type: ignore[attr-defined]
            step = int(items.pop("_step", record.history.step.num))  # type: ignore[attr-defined]
            for key, value in items.items():
                if not key.startswith("_"):
                    curves.setdefault(key, {})[step] = value
    return info, curves
