"""Background WAL checkpoints for the SQLite store (``tether.store.sqlite``).

A checkpoint (copying the WAL back into the database, two fsyncs) run inline by a committing writer stalls
that writer. ``WalCheckpointer`` runs passive checkpoints on a thread and connection of its own (at most every
``CHECKPOINT_EVERY_S``, only after writes, never blocking writers), so commits rarely stall on one; SQLite's
own autocheckpoint stays on, raised to the store's WAL cap, as the bound on the WAL's size. Under steady
writes a passive checkpoint never catches up (writers append while it copies), so the WAL would only restart
at that cap, in a writer, with a stall of tens of ms; past ``RESTART_FRAMES`` the thread therefore finishes
the job holding the store's write lock for the few frames left (a few ms), and the next writer restarts the
WAL. None of this changes what survives a crash: a commit is durable once ``COMMIT`` returns.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

CHECKPOINT_EVERY_S = 0.1
RESTART_FRAMES = 4096  # past this many WAL frames (~16 MiB) the background checkpoint catches up fully

_log = logging.getLogger(__name__)


class WalCheckpointer:
    """Passive WAL checkpoints on a thread and connection of their own, started on the first write.

    Woken by each write transaction, it checkpoints at most every ``CHECKPOINT_EVERY_S`` and sleeps while
    nothing is written. A passive checkpoint copies what no reader still needs and never blocks a writer.
    The thread holds no reference to the store, so an unclosed store can still be collected."""

    def __init__(self, path: str, busy_timeout_s: float, write_lock: threading.Lock) -> None:
        self._path = path
        self._busy_timeout_s = busy_timeout_s
        self._write_lock = write_lock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def poke(self) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None and not self._stop.is_set():
                    self._thread = threading.Thread(
                        target=_checkpoint_loop,
                        args=(self._path, self._busy_timeout_s, self._write_lock, self._wake, self._stop),
                        name="tether-sqlite-checkpoint",
                        daemon=True,
                    )
                    self._thread.start()
        self._wake.set()

    def close(self, wait: bool = True) -> None:
        with self._start_lock:
            self._stop.set()
            self._wake.set()
            thread, self._thread = self._thread, None
        if thread is not None and wait:
            thread.join()


def _checkpoint_loop(
    path: str, busy_timeout_s: float, write_lock: threading.Lock, wake: threading.Event, stop: threading.Event
) -> None:
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_s)
    except sqlite3.Error as exc:  # the inline autocheckpoint still bounds the WAL
        _log.warning("no background checkpoints for %s: %s", path, exc)
        return
    try:
        while True:
            wake.wait()
            if stop.is_set():
                return
            wake.clear()
            try:
                _, wal_frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if wal_frames >= RESTART_FRAMES and copied == wal_frames:  # (no reader holds old frames)
                    # Under steady writes a passive checkpoint never catches up with the WAL, so SQLite never
                    # restarts it and a writer ends up checkpointing it inline at the cap, with two fsyncs of
                    # much data (tens of ms). Holding this store's writers back for the few frames written
                    # since the checkpoint above lets the next writer restart the WAL at the cost of ~ms.
                    with write_lock:
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error as exc:  # e.g. the file went away; the writers will report it
                _log.debug("background checkpoint of %s failed: %s", path, exc)
            if stop.wait(CHECKPOINT_EVERY_S):
                return
    finally:
        conn.close()
