"""The PostgreSQL store's connections (``tether.store.postgres``): pools, transactions, errors, notifications.

asyncpg connections belong to the event loop that opened them, so the store keeps one pool per loop that uses
it (normally one), created on first use; the first pool of a store also brings the schema up to date
(``tether.store.postgres._schema``). ``Connections.transaction`` runs a unit of work in one transaction, retries it
when PostgreSQL aborted it for a deadlock or a serialization failure (it changed nothing), and turns
everything else the driver raises into the contract's errors: a lost or refused connection is a
``StoreError`` that names the server and says the call may not have been applied; the pool replaces broken
connections, so the next call works again once the server is back.

``Listener`` holds one extra connection per loop that ``LISTEN``s on the channel a trigger announces finished
rollouts on; ``wait_for_rollouts`` is woken by those notifications, not by polling. When the listening
connection is lost every waiter is woken to look again, and the next waiter opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tether.store.errors import InvalidInput, StoreError
from tether.store.postgres._overlap import Started
from tether.store.postgres._pool import Pool
from tether.store.postgres._schema import FINISHED_CHANNEL, migrate

_T = TypeVar("_T")
_RETRIES = 5  # deadlocks and serialization failures: PostgreSQL rolled the transaction back, so run it again
_CONNECT_TIMEOUT_S = 10.0


def import_asyncpg() -> Any:
    try:
        import asyncpg
    except ImportError:
        raise ImportError('the PostgreSQL store needs asyncpg: pip install "tether[postgres]"') from None
    return asyncpg


def describe(url: str) -> str:
    """``host:port/database`` of a PostgreSQL URL, without the user or password (for messages)."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    return f"{host}:{parts.port or 5432}{parts.path or '/'}"


class Connections:
    """Pools (one per event loop), the schema check on first use, and transactions with error mapping."""

    def __init__(self, url: str, *, max_size: int, warm: Callable[[Any], Awaitable[None]] | None = None) -> None:
        """``warm(conn)`` readies each new connection (after the schema is up to date) before it is used."""
        self.asyncpg = import_asyncpg()
        self._warm = warm
        self.url = url
        self.where = describe(url)
        self.max_size = max_size
        self._pools: dict[asyncio.AbstractEventLoop, Pool] = {}
        self._listeners: dict[asyncio.AbstractEventLoop, Listener] = {}
        self._making: dict[asyncio.AbstractEventLoop, asyncio.Task[Any]] = {}
        self._lock = threading.Lock()
        self._migrated = False
        self.closed = False

    async def pool(self) -> Pool:
        """This loop's pool, made on first use; concurrent first calls share one making (and one migration)."""
        if self.closed:
            raise self._closed()
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is not None:
            return pool
        with self._lock:  # (never held across an await: the loop's other tasks would block on it)
            making = self._making.get(loop)
            if making is None:
                making = self._making[loop] = loop.create_task(self._make_pool(loop))
        return await asyncio.shield(making)

    def _closed(self) -> StoreError:
        return StoreError("this PostgresStore is closed; open a new one")

    async def _connect(self) -> Any:
        """A new connection to a database whose schema is up to date (migrated by the first), readied."""
        conn = await self.asyncpg.connect(self.url, timeout=_CONNECT_TIMEOUT_S)
        try:
            if not self._migrated:
                await migrate(conn, self.where)
                self._migrated = True
            if self._warm is not None:
                await self._warm(conn)
        except BaseException:
            conn.terminate()
            raise
        return conn

    async def _make_pool(self, loop: asyncio.AbstractEventLoop) -> Pool:
        # (``tether.store.postgres._pool``: no reset between callers, since the store leaves no session state
        # behind: advisory locks are transaction-scoped, no ``SET``, no cursor, and ``LISTEN`` is on the
        # listener's own connection; a connection released inside a transaction is terminated, not reused)
        try:
            pool = Pool(self._connect, self.max_size, self._closed)
            pool.release(await pool.acquire())  # the first connection now: an unreachable server fails here
        except StoreError:
            raise
        except Exception as exc:
            raise self.error(exc) from None
        finally:
            with self._lock:
                self._making.pop(loop, None)
        with self._lock:
            self._pools[loop] = pool
        return pool

    async def transaction(self, work: Callable[[Any], Awaitable[_T]], *, single_statement: bool = False) -> _T:
        """Run ``work(conn)`` in one transaction; commit on success, roll back on any error. With
        ``single_statement`` the work sends one statement, atomic on its own: no ``BEGIN``/``COMMIT`` is sent."""
        pool = await self.pool()
        exceptions = self.asyncpg.exceptions
        for attempt in range(_RETRIES):
            try:
                conn = await pool.acquire()
                reuse = False
                try:
                    if single_statement:
                        result = await work(conn)
                    else:
                        async with conn.transaction():
                            result = await work(conn)
                    reuse = True
                    return result
                except (exceptions.PostgresError, StoreError):
                    reuse = True  # the server refused a statement (or the work raised the contract's error,
                    raise  # having rolled back): the connection is fine; anything else drops it
                finally:
                    pool.release(conn, reuse=reuse)
            except (exceptions.DeadlockDetectedError, exceptions.SerializationError) as exc:
                if attempt == _RETRIES - 1:
                    raise self.error(exc) from None
                await asyncio.sleep(0.01 * (attempt + 1))
            except StoreError:
                raise
            except Exception as exc:
                raise self.error(exc) from None
        raise AssertionError("unreachable")

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """One read statement on its own (no explicit transaction: a single statement sees one snapshot)."""
        rows, _ = await self.fetch_during(sql, args, _nothing)
        return rows

    async def fetch_during(self, sql: str, args: tuple[Any, ...], work: Callable[[], _T]) -> tuple[list[Any], _T]:
        """``fetch(sql, *args)`` with ``work()`` run while the server answers: the statement is sent first
        (``tether.store.postgres._overlap``), then ``work`` runs, then the answer is read. Returns both results.
        An exception from ``work`` is raised as it is (the statement's answer is not read: its connection is
        dropped)."""
        pool = await self.pool()
        try:
            conn = await pool.acquire()
        except Exception as exc:
            raise self.error(exc) from None
        reuse = False
        failed: BaseException | None = None
        try:
            started = Started(conn.fetch(sql, *args))
            try:
                done = work()
            except BaseException as exc:
                failed = exc
                conn.terminate()  # its answer is never read: the connection goes, and the call ends at once
                with contextlib.suppress(Exception):
                    await started
                raise
            rows = await started
            reuse = True
            return list(rows), done
        except Exception as exc:
            if exc is failed:
                raise
            reuse = isinstance(exc, self.asyncpg.exceptions.PostgresError)  # the server refused it: still usable
            raise self.error(exc) from None
        finally:
            pool.release(conn, reuse=reuse)

    def error(self, exc: BaseException) -> StoreError:
        """What the driver raised, as the contract's error."""
        asyncpg = self.asyncpg
        if isinstance(exc, StoreError):
            return exc
        if isinstance(exc, asyncpg.exceptions.DataError | asyncpg.exceptions.IntegrityConstraintViolationError):
            return InvalidInput(f"PostgreSQL refused the values: {exc}")
        lost = (OSError, asyncio.TimeoutError, asyncpg.exceptions.InterfaceError)
        if isinstance(exc, lost) or isinstance(
            exc,
            asyncpg.exceptions.PostgresConnectionError
            | asyncpg.exceptions.OperatorInterventionError
            | asyncpg.exceptions.InsufficientResourcesError,
        ):
            return StoreError(
                f"the PostgreSQL store at {self.where} is unreachable ({type(exc).__name__}: {exc}); the call may "
                "not have been applied. Check that the server is running; the store reconnects on the next call"
            )
        return StoreError(f"the PostgreSQL store at {self.where} failed: {type(exc).__name__}: {exc}")

    async def listener(self) -> Listener:
        loop = asyncio.get_running_loop()
        listener = self._listeners.get(loop)
        if listener is None or listener.lost:
            listener = Listener()
            try:
                await self.pool()  # the schema (and its trigger) exists before anyone waits on it
                await listener.connect(self.asyncpg, self.url)
            except StoreError:
                raise
            except Exception as exc:
                raise self.error(exc) from None
            self._listeners[loop] = listener
        return listener

    async def close(self) -> None:
        """Close what this loop holds; pools of other loops are closed if their loop is gone, else terminated."""
        self.closed = True
        loop = asyncio.get_running_loop()
        with self._lock:
            pools, self._pools = self._pools, {}
            listeners, self._listeners = self._listeners, {}
        for owner, listener in listeners.items():
            await listener.close(owner is loop)
        for owner, pool in pools.items():
            await pool.close(graceful=owner is loop)


class Listener:
    """One connection that LISTENs for finished rollouts and wakes the waiters watching them."""

    def __init__(self) -> None:
        self._conn: Any = None
        self._watchers: dict[asyncio.Event, frozenset[str]] = {}
        self.lost = False

    async def connect(self, asyncpg: Any, url: str) -> None:
        self._conn = await asyncpg.connect(url, timeout=_CONNECT_TIMEOUT_S)
        self._conn.add_termination_listener(self._on_lost)
        await self._conn.add_listener(FINISHED_CHANNEL, self._on_notify)

    def watch(self, event: asyncio.Event, rollout_ids: frozenset[str]) -> None:
        self._watchers[event] = rollout_ids

    def unwatch(self, event: asyncio.Event) -> None:
        self._watchers.pop(event, None)

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        for event, ids in self._watchers.items():
            if payload in ids:
                event.set()

    def _on_lost(self, conn: Any) -> None:
        self.lost = True
        for event in self._watchers:  # look again; the next wait reconnects (or reports the server gone)
            event.set()

    async def close(self, same_loop: bool) -> None:
        self._on_lost(self._conn)
        if self._conn is not None and not self._conn.is_closed():
            if same_loop:
                await self._conn.close()
            else:
                self._conn.terminate()


def _nothing() -> None:
    """No work to overlap: ``fetch`` is ``fetch_during`` with this."""
