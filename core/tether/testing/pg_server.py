"""A throwaway PostgreSQL server for tests and benchmarks, from the system's own packages.

``TempPostgres.start()`` runs ``initdb`` into a fresh temp directory (trust auth, so no password) and
``pg_ctl start`` on a free 127.0.0.1 port with ``fsync=off`` (nothing it holds needs to survive a power cut),
and ``stop()`` removes it all. It needs the server binaries (Debian: ``apt-get install postgresql``, found
under ``/usr/lib/postgresql/*/bin``, or on ``PATH``). ``initdb`` refuses to run as root, so as root the
server runs as the ``postgres`` user (``runuser``) that Debian's package creates.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["TempPostgres", "find_bindir"]


def find_bindir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl`` (the newest installed version), or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: [int(x) for x in re.findall(r"\d+", p)],
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TempPostgres:
    """A PostgreSQL server in a temp directory on 127.0.0.1. ``url(db)`` for a database on it."""

    def __init__(self, *, max_connections: int = 400) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError(
                "PostgreSQL's server programs (initdb, pg_ctl) are not installed: "
                "apt-get install postgresql (Debian/Ubuntu), or put initdb on PATH"
            )
        self.bindir = bindir
        self.max_connections = max_connections
        self.as_user = "postgres" if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="tether-pg-"))
        self.data = self.root / "data"
        self.port = 0
        self._databases = 0
        self.user = self.as_user or pwd.getpwuid(os.geteuid()).pw_name
        if self.as_user is not None:
            shutil.chown(self.root, self.as_user, self.as_user)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.as_user is not None:
            cmd = ["runuser", "-u", self.as_user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        return done

    def start(self) -> TempPostgres:
        """initdb (the first time) and start the server; returns self."""
        if not self.data.exists():
            self._run(
                "initdb", "-D", str(self.data), "-A", "trust", "-U", self.user, "-E", "UTF8", "--no-instructions"
            )
        for _ in range(5):  # a free port can be taken between the probe and the bind: try another
            self.port = self.port or _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={self.port} -c fsync=off -c unix_socket_directories='' "
                f"-c max_connections={self.max_connections}"
            )
            try:
                self._run(
                    "pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-o", options, "start"
                )
                return self
            except RuntimeError:
                if "already in use" not in (self.root / "log").read_text(errors="replace"):
                    raise
                self.port = 0
        raise RuntimeError(f"could not find a free port for PostgreSQL; see {self.root / 'log'}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: disconnect clients; ``immediate``: like a crash); the data stays."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new, empty database; returns its URL."""
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"database name {name!r}: use lower-case letters, digits and _")
        self.psql(f"CREATE DATABASE {name}")
        return self.url(name)

    def new_database(self) -> str:
        """A new, empty database with a name of its own; returns its URL."""
        self._databases += 1
        return self.create_database(f"tether_test_{self._databases}")

    def new_schema(self, database: str = "postgres") -> str:
        """A new, empty schema in ``database``: the URL of a store that keeps its tables there (asyncpg passes
        the URL's ``search_path`` to the server). Ten times quicker to make than a database."""
        self._databases += 1
        name = f"tether_test_{self._databases}"
        self.psql(f"CREATE SCHEMA {name}", database)
        return f"{self.url(database)}?search_path={name}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` with the psql client; returns its unaligned output."""
        return self._run(
            "psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", database, "-AtX",
            "-v", "ON_ERROR_STOP=1", "-c", sql,
        ).stdout  # fmt: skip

    def cleanup(self) -> None:
        """Stop the server if it runs and delete its directory."""
        try:
            self.stop("immediate")
        except RuntimeError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> TempPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
