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


class _AsyncLostEvent(_core.LostFlag, asyncio.Event):
    """``lease.lost`` (_core.LostFlag)."""

    def __init__(self, state: _core.LeaseState) -> None:
        super().__init__()
        self._lease_state = state


class _AsyncConnections:
    """Where an async lease's statements go: as _Connections of the
    blocking client, with async connections and pools."""

    def __init__(self, source: AsyncSource) -> None:
        self.pool, self.conn, self.conninfo = _core.classify(
            source, psycopg.AsyncConnection, "an async lease needs a psycopg AsyncConnection, an AsyncConnectionPool or a conninfo string")
        self.own = None
        self.own_mutex = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def connection(self, *, renewal: bool = False, release: bool = False,
                         timeout: Optional[float] = None) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self.pool is not None:
            async with self.pool.connection(timeout=timeout) as conn:
                yield conn
            return
        if release and self.conn is not None and not _core.can_run(self.conn):
            renewal = True  # its transaction failed, or it is closed or busy: the lease's own
        if self.conn is not None and not renewal:
            yield self.conn
            return
        async with self.own_mutex:
            if self.own is None or self.own.closed:
                self.own = await psycopg.AsyncConnection.connect(
                    self.conninfo or "", **_core.connect_kwargs())
            try:
                yield self.own
            except psycopg.OperationalError:
                if self.own.broken:
                    await self.own.close()
                    self.own = None
                raise

    async def call(self, query: str, **kwargs: Any) -> Any:
        async with self.connection(**kwargs) as conn:
            return await _one(conn, query)

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


def _idle_without_autocommit(conn: psycopg.AsyncConnection[Any]) -> bool:
    return not conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE


async def _row(conn: psycopg.AsyncConnection[Any], query: str) -> Any:
    async def fetch() -> Any:
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(query, prepare=False)
            return await cur.fetchone()

    if _idle_without_autocommit(conn):
        async with conn.transaction():
            return await fetch()
    return await fetch()


async def _one(conn: psycopg.AsyncConnection[Any], query: str) -> Any:
    if _idle_without_autocommit(conn):
        async with conn.transaction():
            return await _run(conn, query)
    return await _run(conn, query)


@contextlib.asynccontextmanager
async def _autocommit(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """As the blocking client's _autocommit."""
    switched = not conn.autocommit
    if switched:
        await conn.set_autocommit(True)
    try:
        yield
    finally:
        if switched and not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE:
            await conn.set_autocommit(False)


async def _end_batch(conn: psycopg.AsyncConnection[Any]) -> None:
    if conn.closed or conn.broken or conn.info.transaction_status == pq.TransactionStatus.IDLE:
        return
    with contextlib.suppress(psycopg.Error):
        await conn.rollback()


class Lease(_core.LeaseBase):
    """pgfencing.Lease for asyncio: ``async with Lease(pool, name) as
    lease:``, ``await lease.acquire()``, ``await lease.use(conn)``,
    ``async with lease.transaction(conn):``; ``lost`` is an asyncio.Event.
    Cancelling the task of a waiting acquire() stops the server's wait
    (a grant that came first is released) and raises CancelledError.
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
        at_most: Optional[float] = None,
        at_least: Optional[float] = None,
        on_suspended: Optional[Callable[["Lease", Exception], None]] = None,
        on_resumed: Optional[Callable[["Lease"], None]] = None,
    ) -> None:
        super().__init__(name, ttl, holder, timeout, renew, on_lost, raise_on_release_error,
                         at_most, at_least, on_suspended, on_resumed)
        self.lost = _AsyncLostEvent(self._state)
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

    async def acquire(self, blocking: bool = True, timeout: Any = _core.DEFAULT) -> bool:
        if timeout is _core.DEFAULT:
            timeout = self.timeout
        timeout = _core.seconds(timeout, "timeout", positive=False)
        self._already_acquired()
        deadline = None if timeout is None else time.monotonic() + timeout
        remaining = timeout
        while True:
            wait = _core.wait_interval(blocking, remaining)
            sent = time.monotonic()
            ttl = self._acquire_ttl()
            token = await self._acquire_once(self._state.acquire_sql(ttl, wait, self.holder))
            if token is not None:
                self._granted(token, sent, ttl)
                return True
            if not blocking:
                return False
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False

    async def _acquire_once(self, query: str) -> Optional[int]:
        """One acquire_lease call.  When the task is cancelled while it
        waits, the server's wait is cancelled too (the cancel request sent
        again while the statement runs), and a grant that came first is
        released, before CancelledError goes on."""
        async with self._connections.connection() as conn:
            call = asyncio.ensure_future(_one(conn, query))
            try:
                with translated():
                    return await asyncio.shield(call)
            except asyncio.CancelledError:
                while not call.done():
                    conn.cancel()  # returns once the server has been told
                    await asyncio.wait({call}, timeout=_core.CANCEL_AGAIN)  # _core says why
                try:
                    token = await call
                except psycopg.Error:
                    token = None
                if token is not None:
                    with translated():
                        await _one(conn, _core.release_sql(self.name, token))
                raise

    async def release(self) -> None:
        token = self._state.token
        if token is None:
            raise self._not_acquired()
        await self._stop_renewal()
        keep = self._at_least_left()
        try:
            with translated():
                if keep is not None:
                    await self._connections.call(_core.renew_sql(self.name, token, keep), release=True)
                    released = True
                else:
                    released = await self._connections.call(_core.release_sql(self.name, token), release=True)
        except LeaseLost:
            released = False
        except BaseException:
            self._arm_watchdog()  # as the blocking Lease.release() says
            raise
        finally:
            await self._connections.close()
        self._state.token = None
        if not released:
            raise self._not_released(token)

    async def renew(self, ttl: Optional[float] = None) -> Any:
        span = _core.seconds(ttl, "ttl", positive=True)
        token = self._check_usable("renew()")
        ask, span = self._capped(span)
        if span < _core.SHORTEST:
            raise self._reached_at_most()
        renewal = self._renewing(span)
        try:
            with self._failing():
                expires = await self._connections.call(_core.renew_sql(self.name, token, ask), renewal=True)
        finally:
            self._state.answered(renewal)
        self._renewed(renewal, expires)
        return expires

    async def reacquire(self) -> Any:
        return await self.renew()

    async def extend(self, additional_time: float, replace_ttl: bool = False) -> Any:
        more = _core.seconds(additional_time, "additional_time", positive=True) or 0.0
        if replace_ttl:
            return await self.renew(more)
        token = self._check_usable("extend()")
        left = self._left()
        cap = _core.LONGEST_WAIT.total_seconds() if left is None else left
        if cap < _core.SHORTEST:
            raise self._reached_at_most()
        renewal = self._renewing(min(more, cap))
        try:
            with self._failing():
                async with self._connections.connection(renewal=True) as conn:
                    expires, granted = await _row(conn, _core.extend_sql(self.name, token, more, cap))
        finally:
            self._state.answered(renewal)
        self._state.settle_answer(renewal, granted)
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
        token = self._check_usable("use()")
        _core.require_transaction(conn, "use()")
        query, span = self._use_query(token)
        renewal = self._renewing(span)
        try:
            with self._failing():
                await _run(conn, query)
        finally:
            self._state.answered(renewal)
        self._renewed(renewal, None)
        return token

    async def bind(self, conn: psycopg.AsyncConnection[Any]) -> int:
        token = self._check_usable("bind()")
        _core.require_transaction(conn, "bind()")
        with self._failing():
            await _run(conn, _core.set_token_sql(token))
        return token

    async def _begin(self, conn: psycopg.AsyncConnection[Any]) -> int:
        token = self._check_usable("transaction()")
        query, span = self._use_query(token)
        renewal = self._renewing(span)
        try:
            with self._failing():
                async with conn.cursor() as cur:
                    await cur.execute(f"BEGIN; {query}", prepare=False)
        finally:
            self._state.answered(renewal)
        self._renewed(renewal, None)
        return token

    @contextlib.asynccontextmanager
    async def transaction(self, conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        _core.require_idle(conn, "transaction()")
        if conn.info.pipeline_status != pq.PipelineStatus.OFF:
            # psycopg's BEGIN and use_lease go out together in a pipeline
            with self._failing():
                async with conn.transaction():
                    await self.use(conn)
                    yield conn
            return
        failed = None
        token = None
        async with _autocommit(conn):
            try:
                token = await self._begin(conn)
                yield conn
                if conn.info.transaction_status == pq.TransactionStatus.INERROR:
                    failed = _core.failed_in_block(self.name)
                    raise failed
                await conn.commit()
            except Exception as exc:
                await _end_batch(conn)
                if exc is failed:
                    err = self._failure(exc)
                    if err is exc and not await self._held_after_rollback(conn, token):
                        err = _core.lost_in_block(self.name, token)
                        self._lose(err)
                else:
                    err = self._failure(exc)
                if err is exc:
                    raise
                raise err from exc
            except BaseException:
                await _end_batch(conn)
                raise

    async def _held_after_rollback(self, conn: psycopg.AsyncConnection[Any], token: int) -> bool:
        try:
            return bool(await _one(conn, _core.owned_sql(self.name, token)))
        except psycopg.Error:
            return True

    @contextlib.asynccontextmanager
    async def once(self, conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The blocking Lease.once(), on an AsyncConnection."""
        self._already_acquired()
        _core.require_idle(conn, "once()")
        holder = _core.once_holder(self.holder)
        ttl = self._acquire_ttl()
        acquire, use, release = _core.once_sql(self.name, ttl, self.timeout, holder)
        deadline = time.monotonic() + ttl
        try:
            async with _autocommit(conn):
                try:
                    async with conn.pipeline():
                        await conn.execute("BEGIN", prepare=False)
                        await conn.execute(acquire, prepare=False)
                        await conn.execute(use, prepare=False)
                        yield conn
                        await conn.execute("COMMIT", prepare=False)
                        await conn.execute(release, prepare=False)
                except Exception as exc:
                    await _end_batch(conn)
                    if not await self._once_cleanup(conn, holder) and _core.busy_in_once(exc):
                        raise self._busy() from exc
                    raise
        except Exception as exc:
            err = _core.once_failure(self.name, self.ttl, exc, deadline)
            if err is exc:
                raise
            raise err from exc

    async def _once_cleanup(self, conn: psycopg.AsyncConnection[Any], holder: str) -> bool:
        query = _core.once_cleanup_sql(self.name, holder)
        try:
            if not conn.closed and not conn.broken:
                return await _row(conn, query) is not None
            return await self._connections.call(query, renewal=True) is not None
        except psycopg.Error:
            return True

    def _granted(self, token: int, sent: float, ttl: float) -> None:
        self._state.granted(token, sent, ttl)
        self.lost.clear()
        self.suspended = False
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
            if token is None or self._state.lost_reason is not None:
                return
            ask, span = self._capped(None)
            if span < _core.SHORTEST:
                return  # at_most: the lease ends at its deadline
            renewal = self._renewing(span)
            try:
                with translated():
                    expires = await self._connections.call(
                        _core.renew_sql(self.name, token, ask), renewal=True, timeout=interval)
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
            self._renewal_succeeded()
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
