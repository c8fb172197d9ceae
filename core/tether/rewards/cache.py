"""Judgements kept by the content they judged: a JSON-lines file in the run folder (``judge_cache.jsonl``), so a
resumed run (or a group whose rollouts came out the same) never pays for the same judgement twice."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from tether import _json

CACHE_FILE = "judge_cache.jsonl"


def cache_key(request: Any) -> str:
    """The key of a judgement: a digest of everything that decides it (the judge, its prompt and the
    trajectories)."""
    return hashlib.sha256(_json.dumps(request)).hexdigest()


class JudgeCache:
    """The judgements of one run folder (``directory``), or of this process only (``directory`` None)."""

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / CACHE_FILE if directory is not None else None
        self._entries: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        return self._load().get(key)

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._load()[key] = value
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as out:
                    out.write(json.dumps({"key": key, "value": value}) + "\n")

    def _load(self) -> dict[str, Any]:
        if self._entries is None:
            entries: dict[str, Any] = {}
            if self.path is not None and self.path.exists():
                for line in self.path.read_text(encoding="utf-8").splitlines():
                    try:
                        item = json.loads(line)
                    except json.JSONDecodeError:  # a line cut short by a crash: that judgement is paid again
                        continue
                    if isinstance(item, dict) and isinstance(item.get("key"), str):
                        entries[item["key"]] = item.get("value")
            self._entries = entries
        return self._entries
