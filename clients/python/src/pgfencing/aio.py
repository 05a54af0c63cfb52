# Copyright (c) 2026, the fencing developers
"""The asyncio twin of pgfencing: the same Lease, try_lock and lock on
psycopg's AsyncConnection and psycopg_pool's AsyncConnectionPool, renewed
from a task of the running event loop.

The renewal task runs only while the event loop runs: work that blocks the
loop (a long computation without an await) blocks the renewal too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from types import TracebackType
from typing import Any, AsyncIterator, Callable, Optional, Type, Union

import psycopg
from psycopg import pq
from psycopg.rows import tuple_row

from . import _core
from .errors import Busy, LeaseLost, StaleToken, translate, translated

logger = logging.getLogger("pgfencing")

AsyncSource = Union[str, psycopg.AsyncConnection[Any], Any]


class _AsyncConnections:
    """Where an async lease's statements go: as _Connections of the
    blocking client, with async connections and pools."""

    def __init__(self, source: AsyncSource) -> None:
        self.pool, self.conn, self.conninfo = _core.classify(
            source, psycopg.AsyncConnection, "an async lease needs a psycopg AsyncConnection, an AsyncConnectionPool or a conninfo string")
        self.own = None
        self.own_mutex = asyncio.Lock()

    async def call(self, query: str, *, renewal: bool = False, release: bool = False,
                   timeout: Optional[float] = None) -> Any:
        if self.pool is not None:
            async with self.pool.connection(timeout=timeout) as conn:
                return await _one(conn, query)
        if release and self.conn is not None and not _core.can_run(self.conn):
            renewal = True  # its transaction failed, or it is closed or busy: the lease's own
        if self.conn is not None and not renewal:
            return await _one(self.conn, query)
        async with self.own_mutex:
            if self.own is None or self.own.closed:
                self.own = await psycopg.AsyncConnection.connect(
                    self.conninfo or "", **_core.connect_kwargs())
            try:
                return await _one(self.own, query)
            except psycopg.OperationalError:
                if self.own.broken:
                    await self.own.close()
                    self.own = None
                raise

    async def close(self) -> None:
        async with self.own_mutex:
            if self.own is not None:
                await self.own.close()
                self.own = None


async def _run(conn: psycopg.AsyncConnection[Any], query: str) -> Any:
    """Send one statement of _core unbound (_core says why) and return its
    one value."""
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(query, prepare=False)
        row = await cur.fetchone()
    if conn.info.pipeline_status != pq.PipelineStatus.OFF:
        await (await conn.execute(_core.REPLACE_PORTAL, prepare=False)).fetchall()
    return row[0] if row else None


async def _one(conn: psycopg.AsyncConnection[Any], query: str) -> Any:
    if not conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        async with conn.transaction():
            return await _run(conn, query)
    return await _run(conn, query)


class Lease(_core.LeaseBase):
    """pgfencing.Lease for asyncio: ``async with Lease(pool, name) as
    lease:``, ``await lease.acquire()``, ``await lease.use(conn)``,
    ``async with lease.transaction(conn):``; ``lost`` is an asyncio.Event.
    """

    def __init__(
        self,
        conn_or_pool: AsyncSource,
        name: str,
        ttl: float = 30,
        holder: Optional[str] = None,
        timeout: Optional[float] = 0,
        *,
        renew: bool = True,
        on_lost: Optional[Callable[["Lease"], None]] = None,
        raise_on_release_error: bool = True,
    ) -> None:
        super().__init__(name, ttl, holder, timeout, renew, on_lost, raise_on_release_error)
        self.lost = asyncio.Event()
        self._connections = _AsyncConnections(conn_or_pool)
        self._renewer: Optional[asyncio.Task[None]] = None
        self._watchdog: Optional[asyncio.TimerHandle] = None

    async def __aenter__(self) -> "Lease":
        if await self.acquire(blocking=True, timeout=self.timeout):
            return self
        raise self._busy()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        try:
            await self.release()
        except Exception as err:
            if self._raise_at_exit(err, exc):
                raise

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        timeout = _core.seconds(timeout, "timeout", positive=False)
        self._already_acquired()
        deadline = None if timeout is None else time.monotonic() + timeout
        remaining = timeout
        while True:
            wait = _core.wait_interval(blocking, remaining)
            sent = time.monotonic()
            with translated():
                token = await self._connections.call(self._state.acquire_sql(wait, self.holder))
            if token is not None:
                self._granted(token, sent)
                return True
            if not blocking:
                return False
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False

    async def release(self) -> None:
        token = self._state.token
        if token is None:
            raise self._not_acquired()
        await self._stop_renewal()
        try:
            with translated():
                released = await self._connections.call(_core.release_sql(self.name, token), release=True)
        finally:
            await self._connections.close()
        self._state.token = None
        if not released:
            raise self._not_released(token)

    async def renew(self, ttl: Optional[float] = None) -> Any:
        span = _core.seconds(ttl, "ttl", positive=True)
        token = self._state.check_usable("renew()", self._lose)
        renewal = self._renewing(span)
        try:
            with translated():
                expires = await self._connections.call(
                    _core.renew_sql(self.name, token, span), renewal=True)
        except LeaseLost as lost:
            self._lose(lost)
            raise
        finally:
            self._state.answered(renewal)
        self._renewed(renewal, expires)
        return expires

    async def owned(self) -> bool:
        token = self._state.token
        if token is None or self.lost.is_set():
            return False
        with translated():
            return bool(await self._connections.call(_core.owned_sql(self.name, token), renewal=True))

    async def locked(self) -> bool:
        with translated():
            return bool(await self._connections.call(_core.locked_sql(self.name), renewal=True))

    async def use(self, conn: psycopg.AsyncConnection[Any]) -> int:
        token = self._state.check_usable("use()", self._lose)
        _core.require_transaction(conn, "use()")
        renewal = self._renewing(None)
        try:
            await self._execute(conn, _core.use_sql(self.name, token))
        finally:
            self._state.answered(renewal)
        self._renewed(renewal, None)
        return token

    async def bind(self, conn: psycopg.AsyncConnection[Any]) -> int:
        token = self._state.check_usable("bind()", self._lose)
        _core.require_transaction(conn, "bind()")
        await self._execute(conn, _core.set_token_sql(token))
        return token

    @contextlib.asynccontextmanager
    async def transaction(self, conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        _core.require_idle(conn, "transaction()")
        failed = None
        try:
            with translated():
                async with conn.transaction():
                    token = await self.use(conn)
                    yield conn
                    if conn.info.transaction_status == pq.TransactionStatus.INERROR:
                        failed = _core.failed_in_block(self.name)
                        raise failed
        except (StaleToken, LeaseLost) as err:
            self._lose_on(err)
            raise
        except psycopg.errors.InFailedSqlTransaction as err:
            if err is failed and not await self._held_after_rollback(conn, token):
                lost = _core.lost_in_block(self.name, token)
                self._lose(lost)
                raise lost from err
            raise

    async def _held_after_rollback(self, conn: psycopg.AsyncConnection[Any], token: int) -> bool:
        try:
            return bool(await _one(conn, _core.owned_sql(self.name, token)))
        except psycopg.Error:
            return True

    async def _execute(self, conn: psycopg.AsyncConnection[Any], query: str) -> None:
        try:
            await _run(conn, query)
        except psycopg.Error as exc:
            mapped = translate(exc)
            if mapped is None:
                raise
            self._lose_on(mapped)
            raise mapped from exc

    def _granted(self, token: int, sent: float) -> None:
        self._state.granted(token, sent)
        self.lost.clear()
        self._arm_watchdog()
        if self.renewal:
            self._renewer = asyncio.get_running_loop().create_task(
                self._renew_loop(), name=f"pgfencing renewal of {self.name}")

    async def _renew_loop(self) -> None:
        interval = self.ttl / 3
        pause = interval
        while True:
            await asyncio.sleep(pause)
            token = self._state.token
            if token is None or self.lost.is_set():
                return
            renewal = self._renewing(None)
            try:
                with translated():
                    expires = await self._connections.call(
                        _core.renew_sql(self.name, token, None), renewal=True, timeout=interval)
            except LeaseLost as lost:
                self._lose(lost)
                return
            except Exception as exc:  # a lost connection, an exhausted pool
                self._state.answered(renewal)
                retry = self._renewal_failed(exc, interval)
                if retry is None:
                    return
                pause = retry
                continue
            self._state.answered(renewal)
            self._renewed(renewal, expires)
            pause = interval

    def _arm_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        delay = max(0.0, self._state.deadline - time.monotonic())
        self._watchdog = asyncio.get_running_loop().call_later(delay, self._deadline_passed)

    async def _stop_renewal(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        renewer, self._renewer = self._renewer, None
        if renewer is not None and renewer is not asyncio.current_task():
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer


async def try_lock(conn: psycopg.AsyncConnection[Any], name: str) -> Optional[int]:
    """pgfencing.try_lock for an AsyncConnection."""
    _core.require_transaction(conn, "try_lock()")
    query = _core.try_lock_sql(name)
    with translated(lock_held=True):
        return await _run(conn, query)


async def lock(conn: psycopg.AsyncConnection[Any], name: str, timeout: Optional[float] = None) -> int:
    """pgfencing.lock for an AsyncConnection."""
    timeout = _core.seconds(timeout, "timeout", positive=False)
    _core.require_transaction(conn, "lock()")
    query = _core.lock_sql(name, timeout)
    with translated(lock_held=True):
        token = await _run(conn, query)
    if token is None:
        raise Busy(f'fencing lock "{name}" stayed held for the timeout of {timeout} s')
    return int(token)
