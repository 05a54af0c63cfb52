# Copyright (c) 2026, the fencing developers
"""The blocking client: Lease, a lease held by the server across
transactions and connections, renewed from a thread of its own; and the
transaction locks try_lock and lock."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from types import TracebackType
from typing import Any, Callable, Iterator, Optional, Type, Union

import psycopg
from psycopg import pq
from psycopg.rows import tuple_row

from . import _core
from .errors import Busy, LeaseLost, StaleToken, translate, translated

logger = logging.getLogger("pgfencing")

Source = Union[str, psycopg.Connection[Any], Any]


class _Connections:
    """Where a lease's statements go.

    A pool (psycopg_pool.ConnectionPool): every call takes a connection
    for itself.  A conninfo string: one connection the lease opens.  A
    connection: acquire and release on it, renewals on a second one the
    lease opens with the same parameters.  The renewals never use the
    caller's connection, which may be busy with the work; nor does a
    release when that connection cannot run it (its transaction failed,
    it is closed or busy): the lease is the server's, not the session's,
    and the caller's transaction is the caller's to end.
    """

    def __init__(self, source: Source) -> None:
        self.pool, self.conn, self.conninfo = _core.classify(
            source, psycopg.Connection, "a lease needs a psycopg Connection, a ConnectionPool or a conninfo string")
        self.own = None
        self.own_mutex = threading.Lock()

    def call(self, query: str, *, renewal: bool = False, release: bool = False,
             timeout: Optional[float] = None) -> Any:
        """The one value of a statement, committed at once."""
        if self.pool is not None:
            with self.pool.connection(timeout=timeout) as conn:
                return _one(conn, query)
        if release and self.conn is not None and not _core.can_run(self.conn):
            renewal = True  # its transaction failed, or it is closed or busy: the lease's own
        if self.conn is not None and not renewal:
            return _one(self.conn, query)
        with self.own_mutex:
            if self.own is None or self.own.closed:
                self.own = psycopg.Connection.connect(self.conninfo or "", **_core.connect_kwargs())
            try:
                return _one(self.own, query)
            except psycopg.OperationalError:
                if self.own.broken:
                    self.own.close()
                    self.own = None
                raise

    def close(self) -> None:
        with self.own_mutex:
            if self.own is not None:
                self.own.close()
                self.own = None


def _run(conn: psycopg.Connection[Any], query: str) -> Any:
    """Send one statement of _core unbound (_core says why) and return its
    one value."""
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query, prepare=False)
        row = cur.fetchone()
    if conn.info.pipeline_status != pq.PipelineStatus.OFF:
        conn.execute(_core.REPLACE_PORTAL, prepare=False).fetchall()
    return row[0] if row else None


def _one(conn: psycopg.Connection[Any], query: str) -> Any:
    """Run one statement and return its one value.  On an idle connection
    without autocommit it gets a transaction of its own, committed at once;
    in the caller's open transaction it simply runs (a lease call takes
    effect at once whatever that transaction does)."""
    if not conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        with conn.transaction():
            return _run(conn, query)
    return _run(conn, query)


class Lease(_core.LeaseBase):
    """A lease on ``name`` held by the server, across COMMITs, ROLLBACKs and
    reconnects, until released or until ``ttl`` seconds pass without a
    renewal; its ``token`` fences the work.

    ``with Lease(pool, name) as lease:`` acquires, waiting at most
    ``timeout`` seconds (default 0: try once), raises Busy when not
    granted, and releases on exit.  Or, as redis-py's Lock:
    ``acquire(blocking=True, timeout=None)``, ``release()``,
    ``renew(ttl=None)``, ``owned()``, ``locked()``.

    While held, a thread renews it every ttl/3 on a connection of its own.
    When renewal fails with FN004, or cannot get through before the lease
    may have expired, it stops, sets ``lost`` (a threading.Event) and calls
    the ``on_lost`` callbacks; the next ``use()`` raises LeaseLost.
    """

    def __init__(
        self,
        conn_or_pool: Source,
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
        self.lost = threading.Event()
        self._connections = _Connections(conn_or_pool)
        self._stop = threading.Event()
        self._renewer: Optional[threading.Thread] = None
        self._watchdog: Optional[threading.Timer] = None

    # --- acquire and release ------------------------------------------------

    def __enter__(self) -> "Lease":
        if self.acquire(blocking=True, timeout=self.timeout):
            return self
        raise self._busy()

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        try:
            self.release()
        except Exception as err:
            if self._raise_at_exit(err, exc):
                raise

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Take the lease: True when granted, False when the name stayed held
        for ``timeout`` seconds (None: wait as long as it takes; with
        ``blocking=False``, try once)."""
        timeout = _core.seconds(timeout, "timeout", positive=False)
        self._already_acquired()
        deadline = None if timeout is None else time.monotonic() + timeout
        remaining = timeout
        while True:
            wait = _core.wait_interval(blocking, remaining)
            sent = time.monotonic()
            with translated():
                token = self._connections.call(self._state.acquire_sql(wait, self.holder))
            if token is not None:
                self._granted(token, sent)
                return True
            if not blocking:
                return False
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False

    def release(self) -> None:
        """Free the lease.  Raises LeaseLost when the server no longer held it
        with this token (it expired or was broken: work after that may have
        been fenced out), as redis-py raises LockNotOwnedError.  A release
        that did not get through (a lost connection) keeps the token: call
        release() again."""
        token = self._state.token
        if token is None:
            raise self._not_acquired()
        self._stop_renewal()
        try:
            with translated():
                released = self._connections.call(_core.release_sql(self.name, token), release=True)
        finally:
            self._connections.close()
        self._state.token = None
        if not released:
            raise self._not_released(token)

    def renew(self, ttl: Optional[float] = None) -> Any:
        """Renew now, for ``ttl`` seconds (default: the lease's ttl); returns
        the new expiry.  LeaseLost when it is not held any more."""
        span = _core.seconds(ttl, "ttl", positive=True)
        token = self._state.check_usable("renew()", self._lose)
        renewal = self._renewing(span)
        try:
            with translated():
                expires = self._connections.call(_core.renew_sql(self.name, token, span), renewal=True)
        except LeaseLost as lost:
            self._lose(lost)
            raise
        finally:
            self._state.answered(renewal)
        self._renewed(renewal, expires)
        return expires

    def owned(self) -> bool:
        """True when the server holds the lease with this handle's token."""
        token = self._state.token
        if token is None or self.lost.is_set():
            return False
        with translated():
            return bool(self._connections.call(_core.owned_sql(self.name, token), renewal=True))

    def locked(self) -> bool:
        """True when anybody holds a lease on the name."""
        with translated():
            return bool(self._connections.call(_core.locked_sql(self.name), renewal=True))

    # --- the work ---------------------------------------------------------------

    def use(self, conn: psycopg.Connection[Any]) -> int:
        """The first statement of each batch transaction on ``conn``: checks
        that the lease is held with this token, renews it, raises the fence
        of the lease's name to the token and sets the transaction's
        fencing.token.  Raises LeaseLost when the lease is gone, and
        NotInTransaction on an autocommit connection outside a transaction
        block.  Returns the token."""
        token = self._state.check_usable("use()", self._lose)
        _core.require_transaction(conn, "use()")
        renewal = self._renewing(None)
        try:
            self._execute(conn, _core.use_sql(self.name, token))
        finally:
            self._state.answered(renewal)
        self._renewed(renewal, None)
        return token

    def bind(self, conn: psycopg.Connection[Any]) -> int:
        """Set only the transaction's fencing.token to the token
        (fencing.set_token), without use()'s check, renewal and fence."""
        token = self._state.check_usable("bind()", self._lose)
        _core.require_transaction(conn, "bind()")
        self._execute(conn, _core.set_token_sql(token))
        return token

    @contextlib.contextmanager
    def transaction(self, conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
        """One batch: a transaction on ``conn`` that starts with use() and
        commits at the end of the block (rolls back on an exception).
        Fencing's errors inside it are raised as pgfencing exceptions; a
        StaleToken or LeaseLost also marks the lease lost.  A block that
        caught an error of the transaction and went on does not commit:
        LeaseLost when the lease is gone, else InFailedSqlTransaction."""
        _core.require_idle(conn, "transaction()")
        failed = None
        try:
            with translated(), conn.transaction():
                token = self.use(conn)
                yield conn
                if conn.info.transaction_status == pq.TransactionStatus.INERROR:
                    failed = _core.failed_in_block(self.name)
                    raise failed
        except (StaleToken, LeaseLost) as err:
            self._lose_on(err)
            raise
        except psycopg.errors.InFailedSqlTransaction as err:
            if err is failed and not self._held_after_rollback(conn, token):
                lost = _core.lost_in_block(self.name, token)
                self._lose(lost)
                raise lost from err
            raise

    def _held_after_rollback(self, conn: psycopg.Connection[Any], token: int) -> bool:
        """Does the server still hold the lease with token?  Asked on conn,
        idle again; True when it cannot tell."""
        try:
            return bool(_one(conn, _core.owned_sql(self.name, token)))
        except psycopg.Error:
            return True

    def _execute(self, conn: psycopg.Connection[Any], query: str) -> None:
        try:
            _run(conn, query)
        except psycopg.Error as exc:
            mapped = translate(exc)
            if mapped is None:
                raise
            self._lose_on(mapped)
            raise mapped from exc

    # --- renewal ------------------------------------------------------------------

    def _granted(self, token: int, sent: float) -> None:
        self._state.granted(token, sent)
        self.lost.clear()
        self._stop.clear()
        self._arm_watchdog()
        if self.renewal:
            self._renewer = threading.Thread(
                target=self._renew_loop, name=f"pgfencing renewal of {self.name}", daemon=True)
            self._renewer.start()

    def _renew_loop(self) -> None:
        interval = self.ttl / 3
        pause = interval
        while not self._stop.wait(pause):
            token = self._state.token
            if token is None or self.lost.is_set():
                return
            renewal = self._renewing(None)
            try:
                with translated():
                    expires = self._connections.call(
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
        """Mark the lease lost at its deadline even if the renewal is stuck
        (a network that swallows packets)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        delay = max(0.0, self._state.deadline - time.monotonic())
        self._watchdog = threading.Timer(delay, self._deadline_passed)
        self._watchdog.daemon = True
        self._watchdog.start()

    def _stopping(self) -> None:
        self._stop.set()

    def _stop_renewal(self) -> None:
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        renewer, self._renewer = self._renewer, None
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join(timeout=self.ttl)


# --- transaction locks -----------------------------------------------------------


def try_lock(conn: psycopg.Connection[Any], name: str) -> Optional[int]:
    """fencing.try_lock in the transaction of ``conn``: the token, or None
    when the name is held.  The lock ends with the transaction.  Refuses an
    autocommit connection outside a transaction block, and a pool."""
    _core.require_transaction(conn, "try_lock()")
    query = _core.try_lock_sql(name)
    with translated(lock_held=True):
        return _run(conn, query)


def lock(conn: psycopg.Connection[Any], name: str, timeout: Optional[float] = None) -> int:
    """fencing.lock in the transaction of ``conn``: waits at most ``timeout``
    seconds (None: as long as it takes) and returns the token; Busy when
    the timeout passed."""
    timeout = _core.seconds(timeout, "timeout", positive=False)
    _core.require_transaction(conn, "lock()")
    query = _core.lock_sql(name, timeout)
    with translated(lock_held=True):
        token = _run(conn, query)
    if token is None:
        raise Busy(f'fencing lock "{name}" stayed held for the timeout of {timeout} s')
    return int(token)
