"""What the dashboard shows: its sources. A source is a store (``--store``, or the store a store server
serves), or a training run's folder under ``--runs`` (``runs/<name>/``: ``metrics.jsonl`` written by ``fit``
as it goes, and the run's own ``store.db`` when it used the default store). Run folders are found again on
every look, so a run started after the dashboard shows up; their stores are opened on first use.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.dashboard.index import RolloutIndex
from tether.store import open_store
from tether.store.base import Store

_MAX_DEPTH = 3  # runs/<name>/ and one or two levels more (an example's run folder holds several runs)
_SKIP = {"checkpoint", "checkpoint.tmp", "checkpoint.old", "__pycache__", ".git"}
_METRICS_CHUNK = 4 << 20  # one metrics read returns at most this many bytes of new lines


@dataclass
class Source:
    name: str
    kind: str  # "store" or "run"
    path: Path | None = None  # the run folder
    store_url: str | None = None
    store: Store | None = None
    owned: bool = False  # the dashboard opened the store and closes it
    token: str | None = field(default=None, repr=False)  # for an ``http://`` store
    _index: RolloutIndex | None = field(default=None, repr=False)

    @property
    def metrics_path(self) -> Path | None:
        return self.path / "metrics.jsonl" if self.path is not None else None

    def open_store(self) -> Store | None:
        if self.store is None and self.store_url is not None:
            self.store = open_store(self.store_url, token=self.token)
            self.owned = True
        return self.store

    def index(self) -> RolloutIndex | None:
        store = self.open_store()
        if store is None:
            return None
        if self._index is None:
            self._index = RolloutIndex(store)
        return self._index

    async def close(self) -> None:
        if self._index is not None:
            await self._index.close()
        if self.owned and self.store is not None:
            await self.store.close()
            self.store = None

    def summary(self) -> dict[str, Any]:
        """What the runs list shows: the latest train reward and held-out accuracy, and when it last wrote."""
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "path": str(self.path) if self.path is not None else None,
            "store": _display_url(self.store_url) if self.store_url else ("served store" if self.store else None),
            "has_store": self.store is not None or self.store_url is not None,
            "has_metrics": False,
        }
        metrics = self.metrics_path
        if metrics is None or not metrics.is_file():
            return out
        stat = metrics.stat()
        out["has_metrics"] = True
        out["updated_at"] = stat.st_mtime
        last_train: dict[str, Any] | None = None
        last_eval: dict[str, Any] | None = None
        for record in _tail_records(metrics, 64 << 10):
            if record.get("kind") == "train":
                last_train = record
            elif record.get("kind") == "eval":
                last_eval = record
        if last_train is not None:
            out["step"] = last_train.get("step")
            out["reward"] = last_train.get("reward")
        if last_eval is not None:
            out["step"] = max(out.get("step") or 0, last_eval.get("step") or 0)
            for key in ("greedy_accuracy", "sampled_accuracy"):
                if isinstance(last_eval.get(key), int | float):
                    out["accuracy"] = last_eval[key]
                    out["accuracy_key"] = key
                    break
        return out


class Sources:
    """The ``--store`` source (if any) and the run folders under ``runs_root`` (if given)."""

    def __init__(
        self,
        store_url: str | None = None,
        runs_root: str | os.PathLike[str] | None = None,
        *,
        token: str | None = None,
    ) -> None:
        self._fixed: list[Source] = []
        if store_url is not None:
            self._fixed.append(
                Source(name=_display_url(store_url), kind="store", store_url=store_url, token=token)
            )
        self.runs_root = Path(runs_root) if runs_root is not None else None
        self._runs: dict[str, Source] = {}

    @classmethod
    def of_store(cls, store: Store, name: str = "store") -> Sources:
        """One source: a store object the caller owns (a store server's)."""
        sources = cls()
        sources._fixed.append(Source(name=name, kind="store", store=store))
        return sources

    def all(self) -> list[Source]:
        self._discover()
        runs = sorted(self._runs.values(), key=lambda s: _mtime(s.path), reverse=True)
        return [*self._fixed, *runs]

    def get(self, name: str) -> Source:
        for source in self._fixed:
            if source.name == name:
                return source
        if name not in self._runs:
            self._discover()
        try:
            return self._runs[name]
        except KeyError:
            raise LookupError(f"no source named {name!r}") from None

    async def close(self) -> None:
        for source in [*self._fixed, *self._runs.values()]:
            await source.close()

    def _discover(self) -> None:
        root = self.runs_root
        if root is None or not root.is_dir():
            return
        for folder in _run_folders(root):
            name = folder.relative_to(root).as_posix()
            if name in self._runs:
                continue
            db = folder / "store.db"
            url = f"sqlite:///{db.resolve()}" if db.is_file() else None
            self._runs[name] = Source(name=name, kind="run", path=folder, store_url=url)
        for name, source in list(self._runs.items()):  # a store.db that appeared after the folder was found
            if source.store_url is None and source.path is not None and (source.path / "store.db").is_file():
                source.store_url = f"sqlite:///{(source.path / 'store.db').resolve()}"
            if name and source.path is not None and not source.path.exists() and source.store is None:
                del self._runs[name]


def _run_folders(root: Path, depth: int = 0) -> list[Path]:
    out: list[Path] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return out
    names = {e.name for e in entries}
    if depth > 0 and ("metrics.jsonl" in names or "store.db" in names):
        out.append(root)
    if depth < _MAX_DEPTH:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and entry.name not in _SKIP and not entry.name.startswith("."):
                out.extend(_run_folders(Path(entry.path), depth + 1))
    return out


def _mtime(path: Path | None) -> float:
    if path is None:
        return 0.0
    try:
        return max((path / "metrics.jsonl").stat().st_mtime, path.stat().st_mtime)
    except OSError:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0


def _display_url(url: str) -> str:
    """A store URL without credentials (a PostgreSQL URL may carry a password)."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://{rest.rsplit('@', 1)[1]}"
    return url


def read_metrics(path: Path, since: int = 0) -> dict[str, Any]:
    """The complete lines of a metrics file from byte ``since`` on: ``records``, ``next`` (the byte to ask
    from next time) and ``reset`` (the file was started again: drop what was read before)."""
    try:
        size = path.stat().st_size
    except OSError:
        return {"records": [], "next": 0, "reset": since > 0}
    reset = since > size
    start = 0 if reset else max(0, since)
    with path.open("rb") as f:
        f.seek(start)
        data = f.read(_METRICS_CHUNK)
    end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
    return {"records": _records(data[:end].splitlines()), "next": start + end, "reset": reset}


def _tail_records(path: Path, size: int) -> list[dict[str, Any]]:
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        length = f.tell()
        f.seek(max(0, length - size))
        data = f.read()
    lines = data.splitlines()
    if length > size:
        lines = lines[1:]  # the first line may be cut
    return _records(lines)


def read_apo_history(path: Path | None) -> list[dict[str, Any]]:
    """APO's candidate records from a run folder's ``apo_history.jsonl`` (empty when there is none)."""
    if path is None:
        return []
    file = path / "apo_history.jsonl"
    if not file.is_file():
        return []
    return _records(file.read_text().splitlines())


def _records(lines: Iterable[str | bytes]) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file's ``lines``; a line that is not one (cut, or half written) is
    skipped."""
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out
