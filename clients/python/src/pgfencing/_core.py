# Copyright (c) 2026, the fencing developers
"""What the blocking and the asyncio clients share: the SQL they send, the
checks of their arguments and connections, and the lease's bookkeeping,
none of which does I/O."""

from __future__ import annotations

import datetime
import logging
import os
import re
import socket
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

import psycopg
from psycopg import pq

from .errors import FencingError, LeaseLost, NotInTransaction, StaleToken

logger = logging.getLogger("pgfencing")

# Why every statement goes unbound.  A SELECT sent through the extended
# protocol (bound parameters, named or unnamed statements, pipeline mode)
# leaves its unnamed portal open when it completes, and that portal keeps
# the statement's snapshot registered until the next Bind or simple query:
# a READ COMMITTED transaction that then sits idle holding a lock or a
# lease keeps backend_xmin set and holds back VACUUM in its database.  A
# simple query drops its portal when it completes.  So pgfencing writes
# each value into the statement and sends it as a simple query, never
# prepared (PgBouncer in transaction pooling mode hands each transaction
# another server connection, where a prepared statement does not exist);
# in pipeline mode, where libpq allows only the extended protocol, a SHOW
# that takes no snapshot follows and replaces the portal.
#
# A value written into the statement cannot break out of it, whatever the
# session's client_encoding and standard_conforming_strings: text made of
# printable ASCII other than ' and \ (the only characters with a meaning
# inside '...') is written as it is; any other text goes as the hex digits
# of its UTF-8 bytes, decoded by the server, so the statement is pure ASCII
# with no escape that a multibyte client encoding could swallow.  A NUL,
# which PostgreSQL text cannot hold, is refused before anything is sent.
_PLAIN = re.compile(r"[ -&(-\[\]-~]*")

TRY_LOCK = "SELECT fencing.try_lock({})"
LOCK = "SELECT fencing.lock({}, {})"
ACQUIRE = "SELECT fencing.acquire_lease({}, {}, {}, {})"
RENEW = "SELECT fencing.renew_lease({}, {}, {})"
RELEASE = "SELECT fencing.release_lease({}, {})"
USE = "SELECT fencing.use_lease({}, {})"
SET_TOKEN = "SELECT fencing.set_token({})"
OWNED = (
    "SELECT EXISTS (SELECT 1 FROM fencing.leases"
    " WHERE database = pg_catalog.current_database()"
    " AND name = fencing.normalize_name({}) AND token = {}"
    " AND expires_at > pg_catalog.clock_timestamp())"
)
LOCKED = (
    "SELECT EXISTS (SELECT 1 FROM fencing.leases"
    " WHERE database = pg_catalog.current_database()"
    " AND name = fencing.normalize_name({})"
    " AND expires_at > pg_catalog.clock_timestamp())"
)
# Sent after a statement in pipeline mode: its Bind drops the unnamed
# portal, and SHOW takes no snapshot.
REPLACE_PORTAL = "SHOW transaction_isolation"


def text(value: Optional[str], what: str) -> str:
    """value as an SQL expression of type text (see above)."""
    if value is None:
        return "NULL::pg_catalog.text"
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character, which PostgreSQL text cannot hold")
    if _PLAIN.fullmatch(value):
        return f"'{value}'::pg_catalog.text"
    return f"pg_catalog.convert_from(pg_catalog.decode('{value.encode('utf-8').hex()}', 'hex'), 'UTF8')"


def bigint(value: int) -> str:
    """A token as an SQL expression of type bigint."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a token must be an int, not {type(value).__name__}")
    return f"{value:d}::bigint"


def sql_interval(value: Optional[datetime.timedelta]) -> str:
    """A duration (never negative) as an SQL expression of type interval."""
    if value is None:
        return "NULL::interval"
    return f"'{value.days} days {value.seconds} seconds {value.microseconds} microseconds'::interval"


def seconds_interval(value: Optional[float]) -> str:
    return sql_interval(None if value is None else interval(value))


def try_lock_sql(name: str) -> str:
    return TRY_LOCK.format(text(name, "the lock name"))


def lock_sql(name: str, timeout: Optional[float]) -> str:
    return LOCK.format(text(name, "the lock name"), seconds_interval(timeout))


def use_sql(name: str, token: int) -> str:
    return USE.format(text(name, "the lease name"), bigint(token))


def set_token_sql(token: int) -> str:
    return SET_TOKEN.format(bigint(token))


def release_sql(name: str, token: int) -> str:
    return RELEASE.format(text(name, "the lease name"), bigint(token))


def renew_sql(name: str, token: int, ttl: Optional[float]) -> str:
    return RENEW.format(text(name, "the lease name"), bigint(token), seconds_interval(ttl))


def owned_sql(name: str, token: int) -> str:
    return OWNED.format(text(name, "the lease name"), bigint(token))


def locked_sql(name: str) -> str:
    return LOCKED.format(text(name, "the lease name"))


# acquire_lease waits at most this long per call (its cap, INT_MAX ms);
# waiting without a limit repeats the call.
LONGEST_WAIT = datetime.timedelta(milliseconds=2**31 - 1)

# How often a renewal that failed for a reason other than FN004 (a lost
# connection, an exhausted pool) is tried again, at most, before the lease
# may have expired.
RETRY_SECONDS = 0.5


def default_holder() -> str:
    """What fencing.leases shows as the holder when none is given."""
    return f"{socket.gethostname()} pid {os.getpid()}"


def seconds(value: Optional[float], what: str, *, positive: bool) -> Optional[float]:
    """A duration argument in seconds, checked: a number, positive or at
    least zero."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if positive and value <= 0:
        raise ValueError(f"{what} must be positive")
    if value < 0:
        raise ValueError(f"{what} must not be negative")
    return float(value)


def interval(value: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=value)


def wait_interval(blocking: bool, timeout: Optional[float]) -> datetime.timedelta:
    """acquire_lease's timeout argument for one call: zero tries once."""
    if not blocking:
        return datetime.timedelta(0)
    if timeout is None:
        return LONGEST_WAIT
    return min(interval(timeout), LONGEST_WAIT)


def check_pool_free(conn: Any, what: str) -> None:
    """Refuse a pool where one connection is needed: each checkout may be
    another server session."""
    if hasattr(conn, "getconn") and hasattr(conn, "putconn"):
        raise TypeError(
            f"{what} needs a connection, not a pool: take one with "
            "'with pool.connection() as conn:' and pass conn"
        )


def require_transaction(conn: Any, what: str) -> None:
    """Refuse an autocommit connection outside a transaction block: there
    the statement is its own transaction, and the lock, the fence and
    fencing.token would end with it."""
    check_pool_free(conn, what)
    if conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        raise NotInTransaction(
            f"{what} needs a transaction: this connection is in autocommit mode "
            "and outside a transaction block; use 'with conn.transaction():' "
            "or a connection without autocommit"
        )


def can_run(conn: Any) -> bool:
    """Can conn run a statement now: open, and idle or in a transaction
    that has not failed?"""
    if conn.closed or conn.broken:
        return False
    return conn.info.transaction_status in (pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS)


def require_idle(conn: Any, what: str) -> None:
    """Refuse a connection already in a transaction: the block would become
    a savepoint of it instead of a batch of its own."""
    check_pool_free(conn, what)
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        raise FencingError(
            f"{what} starts a transaction of its own, and this connection is "
            "already in one: commit or roll it back first"
        )


def renewal_conninfo(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> str:
    """The parameters of a second connection to the server of conn, for the
    renewals (info.dsn leaves the password out)."""
    info = conn.info
    password = info.password
    if password:
        return psycopg.conninfo.make_conninfo(info.dsn, password=password)
    return info.dsn


def classify(source: Any, conn_class: type, what: str) -> Tuple[Any, Any, Optional[str]]:
    """(pool, connection, conninfo) of a lease's source: a pool, a
    connection (the conninfo is then for the renewals' own connection), or
    a conninfo string."""
    if isinstance(source, str):
        return None, None, source
    if isinstance(source, conn_class):
        return None, source, renewal_conninfo(source)
    if hasattr(source, "connection") and hasattr(source, "getconn"):
        return source, None, None
    raise TypeError(f"{what}, not {type(source).__name__}")


def connect_kwargs() -> dict[str, Any]:
    """The connections a lease opens itself: autocommit (each call is one
    transaction) and nothing prepared (PgBouncer)."""
    return {"autocommit": True, "prepare_threshold": None}


class LeaseState:
    """A lease's token and deadline, shared by the caller's thread and the
    renewal.

    The deadline is when the lease has surely expired on the server
    without a renewal.  A renewal sets the server's expiry to when it runs
    plus its ttl (the one it asks for, or the lease's own when it asks for
    none), replacing the expiry before it, also a later one; it runs after
    it was sent, so the expiry it sets is at or after sent + ttl here.
    Renewals overlap (the background's, renew(), use()) and the server may
    apply them in another order than their answers come back, so the
    deadline is the earliest sent + ttl of the renewals that may have been
    the last one applied: each one from when it is sent until a successful
    renewal sent after its answer came back (which ran after it).
    """

    def __init__(self, name: str, ttl: float) -> None:
        self.name = name
        self.ttl = ttl
        self.token: Optional[int] = None
        self.expires_at: Optional[datetime.datetime] = None
        self.deadline = 0.0
        self.lost_reason: Optional[LeaseLost] = None
        self.callbacks: List[Callable[[Any], None]] = []
        self.mutex = threading.Lock()
        # [sent, ttl, answered (inf while in flight)] of each renewal that
        # may have been the last one the server applied
        self.renewals: List[List[float]] = []

    def granted(self, token: int, sent: float) -> None:
        with self.mutex:
            self.token = token
            self.renewals = [[sent, self.ttl, time.monotonic()]]
            self.lost_reason = None
            self._settle()

    def renewing(self, ttl: Optional[float]) -> List[float]:
        """A renewal for ttl seconds (None: the lease's own) is sent now;
        answered() is to be told when its answer or its error comes back
        (it ran before that, or not at all), and renewed() when it
        succeeded."""
        with self.mutex:
            renewal = [time.monotonic(), ttl or self.ttl, float("inf")]
            self.renewals.append(renewal)
            self._settle()
            return renewal

    def answered(self, renewal: List[float]) -> None:
        with self.mutex:
            renewal[2] = time.monotonic()

    def renewed(self, renewal: List[float], expires_at: Optional[datetime.datetime]) -> None:
        """The renewal succeeded: it ran after every renewal answered
        before it was sent, none of which is the last one applied."""
        with self.mutex:
            self.renewals = [r for r in self.renewals if r is renewal or r[2] >= renewal[0]]
            if expires_at is not None:
                self.expires_at = expires_at
            self._settle()

    def _settle(self) -> None:
        if self.lost_reason is None:
            self.deadline = min(sent + ttl for sent, ttl, _ in self.renewals)

    def overdue(self) -> bool:
        return time.monotonic() >= self.deadline

    def lose(self, reason: LeaseLost) -> bool:
        """Record the loss; True the first time only."""
        with self.mutex:
            if self.lost_reason is not None:
                return False
            self.lost_reason = reason
            return True

    def not_renewed(self) -> LeaseLost:
        return LeaseLost(
            f'fencing lease "{self.name}" was not renewed within its ttl '
            f"of {self.ttl:g} s: it may have expired"
        )

    def check_usable(self, what: str, lose: Callable[[LeaseLost], None]) -> int:
        """The token, or why the lease may not be used; a lease past its
        deadline is lost through ``lose`` (the handle's own, which also
        tells its callbacks)."""
        if self.token is None:
            raise FencingError(f'{what}: lease "{self.name}" is not acquired')
        if self.lost_reason is None and self.overdue():
            lose(self.not_renewed())
        if self.lost_reason is not None:
            raise LeaseLost(str(self.lost_reason)) from self.lost_reason
        return self.token

    def acquire_sql(self, wait: datetime.timedelta, holder: str) -> str:
        return ACQUIRE.format(text(self.name, "the lease name"), seconds_interval(self.ttl),
                              sql_interval(wait), text(holder, "the holder"))


def stale_lost(name: str, err: FencingError) -> LeaseLost:
    """The loss a StaleToken means: a newer holder passed this one."""
    lost = LeaseLost(f'fencing lease "{name}": a newer holder fenced this one out ({err})')
    lost.__cause__ = err
    return lost


def failed_in_block(name: str) -> psycopg.Error:
    """What a batch raises when its block caught an error of the batch's
    transaction and went on: the server rolls that transaction back at
    COMMIT, which psycopg reports as a success.  Which error it was, psycopg
    does not keep."""
    return psycopg.errors.InFailedSqlTransaction(
        f'fencing lease "{name}": the block caught an error of the batch\'s transaction and '
        "went on; the server rolled the transaction back, nothing of the batch was committed")


def lost_in_block(name: str, token: int) -> LeaseLost:
    """The loss found after such a batch: the lease is not held any more."""
    return LeaseLost(f'fencing lease "{name}" is not held with token {token} any more '
                     "(the batch's transaction failed in the block and was rolled back)")


def call_back(callback: Callable[[Any], None], lease: Any) -> None:
    try:
        callback(lease)
    except Exception:
        logger.exception("an on_lost callback of fencing lease %r failed", lease.name)


class LeaseBase:
    """What the blocking and the asyncio Lease share: their arguments, the
    token, and what losing the lease does.  ``lost`` is the subclass's
    Event (threading or asyncio)."""

    lost: Any

    def __init__(self, name: str, ttl: float, holder: Optional[str], timeout: Optional[float],
                 renew: bool, on_lost: Optional[Callable[[Any], None]],
                 raise_on_release_error: bool) -> None:
        if not isinstance(name, str):
            raise TypeError("the lease name must be a str")
        self.name = name
        self.ttl = seconds(ttl, "ttl", positive=True) or 0.0
        self.timeout = seconds(timeout, "timeout", positive=False)
        self.holder = holder if holder is not None else default_holder()
        self.renewal = renew
        self.raise_on_release_error = raise_on_release_error
        self._state = LeaseState(name, self.ttl)
        if on_lost is not None:
            self._state.callbacks.append(on_lost)

    def __repr__(self) -> str:
        return (f"<{type(self).__module__}.{type(self).__name__} {self.name!r} "
                f"token={self.token} lost={self.lost.is_set()}>")

    @property
    def token(self) -> Optional[int]:
        """The fence token of this holding (an int), None before acquire()
        and after release()."""
        return self._state.token

    @property
    def expires_at(self) -> Any:
        """The server's expiry after the last renewal this handle made."""
        return self._state.expires_at

    def on_lost(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(lease)`` when the lease is lost (at once if it
        already is)."""
        self._state.callbacks.append(callback)
        if self.lost.is_set():
            call_back(callback, self)

    def _busy(self) -> FencingError:
        from .errors import Busy

        return Busy(f'fencing lease "{self.name}" is held by another holder')

    def _not_acquired(self) -> FencingError:
        return FencingError(f'fencing lease "{self.name}" is not acquired')

    def _already_acquired(self) -> None:
        if self._state.token is not None:
            raise FencingError(f'fencing lease "{self.name}" is already acquired by this handle')

    def _not_released(self, token: int) -> LeaseLost:
        return LeaseLost(f'fencing lease "{self.name}" was not held with token {token} any more')

    def _raise_at_exit(self, err: Exception, exc: Optional[BaseException]) -> bool:
        """At the end of a with block whose release failed with err: raise
        err, unless the block is raising already (its exception goes on as
        it was) or err says the lease was gone and the caller asked for a
        warning only."""
        if exc is None and (self.raise_on_release_error or not isinstance(err, LeaseLost)):
            return True
        logger.warning('fencing lease "%s": release at the end of the block: %s', self.name, err)
        return False

    def _lose_on(self, err: FencingError) -> None:
        if isinstance(err, LeaseLost):
            self._lose(err)
        elif isinstance(err, StaleToken):
            self._lose(stale_lost(self.name, err))

    def _arm_watchdog(self) -> None:
        """What the subclass arms to lose the lease at its deadline."""

    def _renewing(self, ttl: Optional[float]) -> List[float]:
        """A renewal is sent: the deadline may come sooner (it may run and
        set a shorter expiry than the one before)."""
        renewal = self._state.renewing(ttl)
        self._arm_watchdog()
        return renewal

    def _renewed(self, renewal: List[float], expires_at: Any) -> None:
        self._state.renewed(renewal, expires_at)
        self._arm_watchdog()

    def _renewal_failed(self, exc: Exception, interval: float) -> Optional[float]:
        """After a renewal failed for a reason other than FN004: the pause
        before trying again, or None when the lease may have expired."""
        if self._state.overdue():
            self._lose(self._state.not_renewed())
            return None
        logger.warning('fencing lease "%s": renewal failed, trying again: %s', self.name, exc)
        return min(interval, RETRY_SECONDS)

    def _deadline_passed(self) -> None:
        """The watchdog ran: lose the lease if its deadline has come.  A
        timer may run a little before its time; it is then set again for
        what is left."""
        if self._state.token is None or self.lost.is_set():
            return
        if self._state.overdue():
            self._lose(self._state.not_renewed())
        else:
            self._arm_watchdog()

    def _stopping(self) -> None:
        """What the subclass stops when the lease is lost."""

    def _lose(self, reason: LeaseLost) -> None:
        if not self._state.lose(reason):
            return
        self._stopping()
        self.lost.set()
        logger.warning("%s", reason)
        for callback in list(self._state.callbacks):
            call_back(callback, self)
