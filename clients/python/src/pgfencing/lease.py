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


class _LostEvent(_core.LostFlag, threading.Event):
    """``lease.lost`` (_core.LostFlag)."""

    def __init__(self, state: _core.LeaseState) -> None:
        super().__init__()
        self._lease_state = state


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

    @contextlib.contextmanager
    def connection(self, *, renewal: bool = False, release: bool = False,
                   timeout: Optional[float] = None) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one call."""
        if self.pool is not None:
            with self.pool.connection(timeout=timeout) as conn:
                yield conn
            return
        if release and self.conn is not None and not _core.can_run(self.conn):
            renewal = True  # its transaction failed, or it is closed or busy: the lease's own
        if self.conn is not None and not renewal:
            yield self.conn
            return
        with self.own_mutex:
            if self.own is None or self.own.closed:
                self.own = psycopg.Connection.connect(self.conninfo or "", **_core.connect_kwargs())
            try:
                yield self.own
            except psycopg.OperationalError:
                if self.own.broken:
                    self.own.close()
                    self.own = None
                raise

    def call(self, query: str, **kwargs: Any) -> Any:
        """The one value of a statement, committed at once."""
        with self.connection(**kwargs) as conn:
            return _one(conn, query)

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


def _row(conn: psycopg.Connection[Any], query: str) -> Any:
    """The first row of one statement, committed at once as _one does."""
    with _transaction_if_idle(conn), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query, prepare=False)
        return cur.fetchone()


def _transaction_if_idle(conn: psycopg.Connection[Any]) -> Any:
    if not conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        return conn.transaction()
    return contextlib.nullcontext()


def _one(conn: psycopg.Connection[Any], query: str) -> Any:
    """Run one statement and return its one value.  On an idle connection
    without autocommit it gets a transaction of its own, committed at once;
    in the caller's open transaction it simply runs (a lease call takes
    effect at once whatever that transaction does)."""
    with _transaction_if_idle(conn):
        return _run(conn, query)


@contextlib.contextmanager
def _autocommit(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The connection in autocommit mode for a block that sends its own
    BEGIN (psycopg sends one of its own, in a round trip of its own, on a
    connection without autocommit), and as it was after it."""
    switched = not conn.autocommit
    if switched:
        conn.autocommit = True
    try:
        yield
    finally:
        if switched and not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE:
            conn.autocommit = False


def _end_batch(conn: psycopg.Connection[Any]) -> None:
    """Roll back what is left of a failed batch, if the connection can."""
    if conn.closed or conn.broken or conn.info.transaction_status == pq.TransactionStatus.IDLE:
        return
    with contextlib.suppress(psycopg.Error):
        conn.rollback()


class Lease(_core.LeaseBase):
    """A lease on ``name`` held by the server, across COMMITs, ROLLBACKs and
    reconnects, until released or until ``ttl`` seconds pass without a
    renewal; its ``token`` fences the work.

    ``with Lease(pool, name) as lease:`` acquires, waiting at most
    ``timeout`` seconds (default 0: try once), raises Busy when not
    granted, and releases on exit.  Or, as redis-py's Lock:
    ``acquire(blocking=True, timeout=<the constructor's>)``, ``release()``,
    ``renew(ttl=None)``, ``extend(additional_time, replace_ttl=False)``,
    ``reacquire()``, ``owned()``, ``locked()``; ``cancel()`` stops a
    waiting acquire() from another thread.

    While held, a thread renews it every ttl/3 on a connection of its own.
    When renewal fails with FN004, or cannot get through before the lease
    may have expired, it stops, sets ``lost`` and calls the ``on_lost``
    callbacks; the next ``use()`` raises LeaseLost.  A renewal that fails
    before then calls ``on_suspended``; the next one that succeeds,
    ``on_resumed``.  ``at_most``: the lease never lasts past that long
    after its acquisition, however often renewed; ``at_least``: a release
    before that long after the acquisition leaves the name taken until
    then.
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
        at_most: Optional[float] = None,
        at_least: Optional[float] = None,
        on_suspended: Optional[Callable[["Lease", Exception], None]] = None,
        on_resumed: Optional[Callable[["Lease"], None]] = None,
    ) -> None:
        super().__init__(name, ttl, holder, timeout, renew, on_lost, raise_on_release_error,
                         at_most, at_least, on_suspended, on_resumed)
        self.lost = _LostEvent(self._state)
        self._connections = _Connections(conn_or_pool)
        self._stop = threading.Event()
        self._renewer: Optional[threading.Thread] = None
        self._watchdog: Optional[threading.Timer] = None
        # cancel(): the acquire in progress and the connection it waits on
        self._cancel_mutex = threading.Lock()
        self._acquiring = False
        self._cancel_requested = False
        self._waiting_on: Optional[psycopg.Connection[Any]] = None
        self._attempt = 0  # counts the statements _waiting_on has waited on

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

    def acquire(self, blocking: bool = True, timeout: Any = _core.DEFAULT) -> bool:
        """Take the lease: True when granted, False when the name stayed held
        for ``timeout`` seconds (default: the constructor's; None: wait as
        long as it takes; with ``blocking=False``, try once).  The wait is
        the server's, woken when the name is released or expires.  Raises
        Cancelled when cancel() stopped it."""
        if timeout is _core.DEFAULT:
            timeout = self.timeout
        timeout = _core.seconds(timeout, "timeout", positive=False)
        self._already_acquired()
        deadline = None if timeout is None else time.monotonic() + timeout
        remaining = timeout
        with self._cancel_mutex:
            self._acquiring = True
            self._cancel_requested = False
        try:
            while True:
                wait = _core.wait_interval(blocking, remaining)
                sent = time.monotonic()
                ttl = self._acquire_ttl()
                token = self._acquire_once(self._state.acquire_sql(ttl, wait, self.holder))
                if token is not None:
                    self._granted(token, sent, ttl)
                    return True
                if not blocking:
                    return False
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
        finally:
            with self._cancel_mutex:
                self._acquiring = False
                self._waiting_on = None

    def _acquire_once(self, query: str) -> Optional[int]:
        """One acquire_lease call, which cancel() may stop.  A cancel that
        came too late to stop it releases what it granted."""
        with self._connections.connection() as conn:
            with self._cancel_mutex:
                if self._cancel_requested:
                    raise self._cancelled()
                self._waiting_on = conn
                self._attempt += 1
            try:
                token = _one(conn, query)
            except psycopg.Error as exc:
                with self._cancel_mutex:  # after a cancel() in progress is done
                    self._waiting_on = None
                    cancelled = self._cancel_requested
                if cancelled and exc.sqlstate == "57014":
                    raise self._cancelled() from exc
                mapped = translate(exc)
                if mapped is None:
                    raise
                raise mapped from exc
            with self._cancel_mutex:
                self._waiting_on = None
                cancelled = self._cancel_requested
            if cancelled:
                if token is not None:
                    with translated():
                        _one(conn, _core.release_sql(self.name, token))
                raise self._cancelled()
            return token

    def cancel(self) -> None:
        """Stop an acquire() that waits in another thread (it raises
        Cancelled, and holds nothing: a grant that came first is released).
        Safe to call from any thread; without an acquire() under way it
        does nothing."""
        with self._cancel_mutex:
            if not self._acquiring:
                return
            self._cancel_requested = True
            if self._waiting_on is None:
                return
            attempt = self._attempt
            # returns once the server has been told; the acquire's thread
            # takes this mutex before it sends anything else
            self._waiting_on.cancel()
        threading.Thread(target=self._cancel_again, args=(attempt,), daemon=True,
                         name=f"pgfencing cancel of {self.name}").start()

    def _cancel_again(self, attempt: int) -> None:
        """Send the cancel request again every CANCEL_AGAIN while the
        statement it cancels runs (_core.CANCEL_AGAIN says why)."""
        while True:
            time.sleep(_core.CANCEL_AGAIN)
            with self._cancel_mutex:
                if self._waiting_on is None or self._attempt != attempt:
                    return
                self._waiting_on.cancel()

    def release(self) -> None:
        """Free the lease.  Raises LeaseLost when the server no longer held it
        with this token (it expired or was broken: work after that may have
        been fenced out), as redis-py raises LockNotOwnedError.  A release
        that did not get through (a lost connection) keeps the token: call
        release() again; meanwhile nothing renews it, and its deadline
        loses it as ever.  Under at_least, a release before that long after
        the acquisition renews the lease for what is left of it instead,
        and the name stays taken until it lapses."""
        token = self._state.token
        if token is None:
            raise self._not_acquired()
        self._stop_renewal()
        keep = self._at_least_left()
        try:
            with translated():
                if keep is not None:
                    self._connections.call(_core.renew_sql(self.name, token, keep), release=True)
                    released = True
                else:
                    released = self._connections.call(_core.release_sql(self.name, token), release=True)
        except LeaseLost:
            released = False
        except BaseException:
            # it did not get through: the lease is still this handle's,
            # renewed no more, and its deadline still loses it
            self._arm_watchdog()
            raise
        finally:
            self._connections.close()
        self._state.token = None
        if not released:
            raise self._not_released(token)

    def renew(self, ttl: Optional[float] = None) -> Any:
        """Renew now, for ``ttl`` seconds (default: the lease's ttl; under
        at_most, never past it); returns the new expiry.  LeaseLost when it
        is not held any more."""
        span = _core.seconds(ttl, "ttl", positive=True)
        token = self._check_usable("renew()")
        ask, span = self._capped(span)
        if span < _core.SHORTEST:
            raise self._reached_at_most()
        renewal = self._renewing(span)
        try:
            with self._failing():
                expires = self._connections.call(_core.renew_sql(self.name, token, ask), renewal=True)
        finally:
            self._state.answered(renewal)
        self._renewed(renewal, expires)
        return expires

    def reacquire(self) -> Any:
        """redis-py's reacquire(): the lease lasts its own ttl from now
        again; returns the new expiry."""
        return self.renew()

    def extend(self, additional_time: float, replace_ttl: bool = False) -> Any:
        """redis-py's extend(): the lease lasts ``additional_time`` seconds
        more than it has left (the server's expiry), or, with
        ``replace_ttl``, ``additional_time`` from now; never past at_most.
        The next renewal (the thread's, or use()) sets it back to the
        lease's own ttl from then.  Returns the new expiry."""
        more = _core.seconds(additional_time, "additional_time", positive=True) or 0.0
        if replace_ttl:
            return self.renew(more)
        token = self._check_usable("extend()")
        left = self._left()
        cap = _core.LONGEST_WAIT.total_seconds() if left is None else left
        if cap < _core.SHORTEST:
            raise self._reached_at_most()
        renewal = self._renewing(min(more, cap))
        try:
            with self._failing():
                with self._connections.connection(renewal=True) as conn:
                    expires, granted = _row(conn, _core.extend_sql(self.name, token, more, cap))
        finally:
            self._state.answered(renewal)
        self._state.settle_answer(renewal, granted)
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
        token = self._check_usable("use()")
        _core.require_transaction(conn, "use()")
        query, span = self._use_query(token)
        renewal = self._renewing(span)
        try:
            with self._failing():
                _run(conn, query)
        finally:
            self._state.answered(renewal)
        self._renewed(renewal, None)
        return token

    def bind(self, conn: psycopg.Connection[Any]) -> int:
        """Set only the transaction's fencing.token to the token
        (fencing.set_token), without use()'s check, renewal and fence."""
        token = self._check_usable("bind()")
        _core.require_transaction(conn, "bind()")
        with self._failing():
            _run(conn, _core.set_token_sql(token))
        return token

    def _begin(self, conn: psycopg.Connection[Any]) -> int:
        """BEGIN and use() in one round trip: one simple query."""
        token = self._check_usable("transaction()")
        query, span = self._use_query(token)
        renewal = self._renewing(span)
        try:
            with self._failing():
                with conn.cursor() as cur:
                    cur.execute(f"BEGIN; {query}", prepare=False)
        finally:
            self._state.answered(renewal)
        self._renewed(renewal, None)
        return token

    @contextlib.contextmanager
    def transaction(self, conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
        """One batch: a transaction on ``conn`` that starts with use() (BEGIN
        and use_lease in one round trip) and commits at the end of the
        block (rolls back on an exception).  Fencing's errors inside it are
        raised as pgfencing exceptions; a StaleToken or LeaseLost also marks
        the lease lost, and once the lease is lost or past its deadline,
        any error of the block is LeaseLost (the driver's error as
        __cause__).  A block that caught an error of the transaction and
        went on does not commit: LeaseLost when the lease is gone, else
        InFailedSqlTransaction."""
        _core.require_idle(conn, "transaction()")
        if conn.info.pipeline_status != pq.PipelineStatus.OFF:
            # psycopg's BEGIN and use_lease go out together in a pipeline
            with self._failing(), conn.transaction():
                self.use(conn)
                yield conn
            return
        failed = None
        token = None
        with _autocommit(conn):
            try:
                token = self._begin(conn)
                yield conn
                if conn.info.transaction_status == pq.TransactionStatus.INERROR:
                    failed = _core.failed_in_block(self.name)
                    raise failed
                conn.commit()
            except Exception as exc:
                _end_batch(conn)
                if exc is failed:
                    err = self._failure(exc)
                    if err is exc and not self._held_after_rollback(conn, token):
                        err = _core.lost_in_block(self.name, token)
                        self._lose(err)
                else:
                    err = self._failure(exc)
                if err is exc:
                    raise
                raise err from exc
            except BaseException:
                _end_batch(conn)
                raise

    def _held_after_rollback(self, conn: psycopg.Connection[Any], token: int) -> bool:
        """Does the server still hold the lease with token?  Asked on conn,
        idle again; True when it cannot tell."""
        try:
            return bool(_one(conn, _core.owned_sql(self.name, token)))
        except psycopg.Error:
            return True

    @contextlib.contextmanager
    def once(self, conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
        """A job that fits one batch, in one round trip: acquire, use(), the
        statements of the block, COMMIT and release, sent together in
        psycopg's pipeline mode (the block's statements are queued, and
        their results are there after the block).  Busy when the name is
        held (nothing of the block runs); a failed job releases the lease
        in a second round trip.  The renewal does not run: the job must
        end within the ttl.  Only for a lease not acquired yet."""
        self._already_acquired()
        _core.require_idle(conn, "once()")
        holder = _core.once_holder(self.holder)
        ttl = self._acquire_ttl()
        acquire, use, release = _core.once_sql(self.name, ttl, self.timeout, holder)
        deadline = time.monotonic() + ttl
        try:
            with _autocommit(conn):
                try:
                    with conn.pipeline():
                        conn.execute("BEGIN", prepare=False)
                        conn.execute(acquire, prepare=False)
                        conn.execute(use, prepare=False)
                        yield conn
                        conn.execute("COMMIT", prepare=False)
                        conn.execute(release, prepare=False)
                except Exception as exc:
                    _end_batch(conn)
                    if not self._once_cleanup(conn, holder) and _core.busy_in_once(exc):
                        raise self._busy() from exc
                    raise
        except Exception as exc:
            err = _core.once_failure(self.name, self.ttl, exc, deadline)
            if err is exc:
                raise
            raise err from exc

    def _once_cleanup(self, conn: psycopg.Connection[Any], holder: str) -> bool:
        """After a failed once(): release the lease the call holds, found by
        its holder; False when it holds none (the name was busy)."""
        query = _core.once_cleanup_sql(self.name, holder)
        try:
            if not conn.closed and not conn.broken:
                return _row(conn, query) is not None
            return self._connections.call(query, renewal=True) is not None
        except psycopg.Error:
            return True  # it cannot tell: the job's own error tells more

    # --- renewal ------------------------------------------------------------------

    def _granted(self, token: int, sent: float, ttl: float) -> None:
        self._state.granted(token, sent, ttl)
        self.lost.clear()
        self.suspended = False
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
            if token is None or self._state.lost_reason is not None:
                return
            ask, span = self._capped(None)
            if span < _core.SHORTEST:
                return  # at_most: the lease ends at its deadline
            renewal = self._renewing(span)
            try:
                with translated():
                    expires = self._connections.call(
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

    def _await_loss(self) -> None:
        if self._losing != threading.get_ident():
            threading.Event.wait(self.lost)

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
