# Copyright (c) 2026, the fencing developers
"""What the blocking and the asyncio clients share: the SQL they send, the
checks of their arguments and connections, and the lease's bookkeeping,
none of which does I/O."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import socket
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Tuple

import psycopg
from psycopg import pq

from .errors import Cancelled, FencingError, LeaseLost, NotInTransaction, StaleToken, idled_out, translate

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
# use_lease renews for the ttl the lease was taken with; under at_most, a
# renewal for what is left follows it in the same statement.
USE_CAPPED = "SELECT fencing.use_lease({0}, {1}), fencing.renew_lease({0}, {1}, {2})"
# extend(): the lease's time left on the server, plus more, at most a cap;
# the answer says which ttl the renewal got.
EXTEND = (
    "SELECT fencing.renew_lease({0}, {1}, x.ttl), extract(epoch FROM x.ttl)::float8"
    " FROM (SELECT least(greatest(coalesce((SELECT expires_at"
    " FROM fencing.leases WHERE database = pg_catalog.current_database()"
    " AND name = fencing.normalize_name({0}) AND token = {1})"
    " - pg_catalog.clock_timestamp(), '0'::interval), '0'::interval) + {2}, {3}) AS ttl) AS x"
)
# A job that fits one batch, in one round trip (Lease.once): BEGIN, the
# acquisition, which keeps its token in a setting of the session ("0" when
# the name stayed held, which use_lease refuses with FN004, so the batch
# stops there), use_lease, the job's statements, COMMIT, and the release,
# which empties the setting.  The setting outlives the COMMIT, so the
# release can name the token; a batch that fails rolls it back with it.
ONCE_ACQUIRE = ("SELECT pg_catalog.set_config('pgfencing.lease',"
                " coalesce(fencing.acquire_lease({}, {}, {}, {})::pg_catalog.text, '0'), false)")
ONCE_USE = "SELECT fencing.use_lease({}, pg_catalog.current_setting('pgfencing.lease')::bigint)"
ONCE_RELEASE = ("SELECT fencing.release_lease({}, pg_catalog.current_setting('pgfencing.lease')::bigint),"
                " pg_catalog.set_config('pgfencing.lease', '', false)")
# After a failed one-round-trip job: the lease it may hold is found by
# its holder, which is unique to the call, and released.
ONCE_CLEANUP = ("SELECT token, fencing.release_lease(name, token) FROM fencing.leases"
                " WHERE database = pg_catalog.current_database()"
                " AND name = fencing.normalize_name({}) AND holder = {}")
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


def use_capped_sql(name: str, token: int, ttl: float) -> str:
    return USE_CAPPED.format(text(name, "the lease name"), bigint(token), seconds_interval(ttl))


def extend_sql(name: str, token: int, more: float, cap: float) -> str:
    return EXTEND.format(text(name, "the lease name"), bigint(token), seconds_interval(more),
                         seconds_interval(cap))


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
        # the monotonic time the acquisition was sent
        self.acquired = 0.0

    def granted(self, token: int, sent: float, ttl: float) -> None:
        with self.mutex:
            self.token = token
            self.acquired = sent
            self.renewals = [[sent, ttl, time.monotonic()]]
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

    def settle_answer(self, renewal: List[float], ttl: float) -> None:
        """The server said which ttl a renewal got (one whose ttl it
        computed): its deadline is sent + that ttl."""
        with self.mutex:
            renewal[1] = ttl
            self._settle()

    def acquire_sql(self, ttl: float, wait: datetime.timedelta, holder: str) -> str:
        return ACQUIRE.format(text(self.name, "the lease name"), seconds_interval(ttl),
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


def call_back(callback: Callable[..., None], lease: Any, *args: Any, what: str = "on_lost") -> None:
    try:
        callback(lease, *args)
    except Exception:
        logger.exception("an %s callback of fencing lease %r failed", what, lease.name)


def idle_lost(name: str, ttl: float, exc: BaseException, what: str = "batch") -> LeaseLost:
    """The loss when the server ended a batch's session for idling in its
    transaction past the lease's ttl (25P03)."""
    lost = LeaseLost(f'fencing lease "{name}": the {what} idled in its transaction past the '
                     f"lease's ttl of {ttl:g} s, and the server ended its session", "25P03")
    lost.__cause__ = exc
    return lost


def once_failure(name: str, ttl: float, exc: BaseException, deadline: float) -> BaseException:
    """What an error of a failed Lease.once() job reaches the application
    as: the idle limit as LeaseLost, any error once the job's deadline
    (its send time + ttl) has passed as LeaseLost, fencing's by SQLSTATE,
    else itself."""
    if isinstance(exc, FencingError) and not isinstance(exc, LeaseLost):
        return exc
    if idled_out(exc):
        return idle_lost(name, ttl, exc, "job")
    if time.monotonic() >= deadline and not isinstance(exc, LeaseLost):
        lost = LeaseLost(f'fencing lease "{name}": the job ran past the lease\'s ttl of {ttl:g} s')
        lost.__cause__ = exc
        return lost
    if isinstance(exc, psycopg.Error):
        mapped = translate(exc)
        if mapped is not None:
            mapped.__cause__ = exc
            return mapped
    return exc


def once_sql(name: str, ttl: float, timeout: Optional[float], holder: str) -> Tuple[str, str, str]:
    """The statements of Lease.once() before and after the job's own."""
    lease = text(name, "the lease name")
    acquire = ONCE_ACQUIRE.format(lease, seconds_interval(ttl), sql_interval(wait_interval(True, timeout)),
                                  text(holder, "the holder"))
    return acquire, ONCE_USE.format(lease), ONCE_RELEASE.format(lease)


def once_cleanup_sql(name: str, holder: str) -> str:
    return ONCE_CLEANUP.format(text(name, "the lease name"), text(holder, "the holder"))


def busy_in_once(exc: BaseException) -> bool:
    """Is a failed Lease.once() one whose name was held?  Its use_lease
    refused the token 0 (FN004), and no lease of the call was found."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate == "FN004"


def once_holder(holder: str) -> str:
    """The holder of one Lease.once() call: the lease's, with a nonce that
    finds this call's lease again after a failure."""
    return f"{holder} (once {os.urandom(6).hex()})"


# acquire()'s timeout when the caller gives none: the constructor's.
DEFAULT = object()

# The shortest renewal the server takes (a ttl of 1 ms).
SHORTEST = 0.001

# How soon a cancel request is sent again while the acquire it cancels
# still runs: one that reaches the session before the statement does is
# ignored there, and the statement then waits for the name.
CANCEL_AGAIN = 0.1


class LostFlag:
    """What ``lease.lost`` adds to its event (threading's or asyncio's):
    ``is_set()`` is true from the moment the lease is lost, while
    ``wait()`` returns once the on_lost callbacks have run."""

    _lease_state: LeaseState

    def is_set(self) -> bool:
        return self._lease_state.lost_reason is not None or super().is_set()  # type: ignore[misc]


class LeaseBase:
    """What the blocking and the asyncio Lease share: their arguments, the
    token, the ttl each renewal asks for, and what losing the lease does.
    ``lost`` is the subclass's event (threading or asyncio), whose
    ``is_set()`` is true from the moment the lease is lost, and whose
    ``wait()`` returns once the on_lost callbacks have run."""

    lost: Any

    def __init__(self, name: str, ttl: float, holder: Optional[str], timeout: Optional[float],
                 renew: bool, on_lost: Optional[Callable[[Any], None]],
                 raise_on_release_error: bool, at_most: Optional[float], at_least: Optional[float],
                 on_suspended: Optional[Callable[[Any, Exception], None]],
                 on_resumed: Optional[Callable[[Any], None]]) -> None:
        if not isinstance(name, str):
            raise TypeError("the lease name must be a str")
        self.name = name
        self.ttl = seconds(ttl, "ttl", positive=True) or 0.0
        self.timeout = seconds(timeout, "timeout", positive=False)
        self.at_most = seconds(at_most, "at_most", positive=True)
        self.at_least = seconds(at_least, "at_least", positive=False)
        if self.at_most is not None and self.at_least is not None and self.at_least > self.at_most:
            raise ValueError("at_least must not be longer than at_most")
        self.holder = holder if holder is not None else default_holder()
        self.renewal = renew
        self.raise_on_release_error = raise_on_release_error
        self._state = LeaseState(name, self.ttl)
        if on_lost is not None:
            self._state.callbacks.append(on_lost)
        self._on_suspended: List[Callable[[Any, Exception], None]] = []
        self._on_resumed: List[Callable[[Any], None]] = []
        if on_suspended is not None:
            self._on_suspended.append(on_suspended)
        if on_resumed is not None:
            self._on_resumed.append(on_resumed)
        self.suspended = False
        # the thread that runs the loss while it runs (the blocking client)
        self._losing: Optional[int] = None

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

    def on_suspended(self, callback: Callable[[Any, Exception], None]) -> None:
        """Call ``callback(lease, error)`` when a background renewal fails
        and the lease is not lost yet (its deadline has not come)."""
        self._on_suspended.append(callback)

    def on_resumed(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(lease)`` when a background renewal succeeds
        after a suspension."""
        self._on_resumed.append(callback)

    # --- the ttl of each request -------------------------------------------------

    def _left(self) -> Optional[float]:
        """Seconds left before at_most ends the lease (None: no ceiling)."""
        if self.at_most is None:
            return None
        return self._state.acquired + self.at_most - time.monotonic()

    def _capped(self, ttl: Optional[float]) -> Tuple[Optional[float], float]:
        """(what a renewal asks the server for, the ttl it gets) for a
        renewal of ``ttl`` seconds (None: the lease's own) sent now: under
        at_most, never past acquired + at_most."""
        span = ttl if ttl is not None else self.ttl
        left = self._left()
        if left is not None and left < span:
            return left, left
        return ttl, span

    def _acquire_ttl(self) -> float:
        return self.ttl if self.at_most is None else min(self.ttl, self.at_most)

    def _use_query(self, token: int) -> Tuple[str, float]:
        """use_lease for a batch sent now, and the ttl it renews for."""
        ask, span = self._capped(None)
        if ask is None:
            return use_sql(self.name, token), span
        if span < SHORTEST:
            raise self._reached_at_most()
        return use_capped_sql(self.name, token, span), span

    def _reached_at_most(self) -> LeaseLost:
        lost = LeaseLost(f'fencing lease "{self.name}" reached its at_most of {self.at_most:g} s')
        self._lose(lost)
        return lost

    def _at_least_left(self) -> Optional[float]:
        """At release: how long the name must stay taken (at_least), or
        None when it may be freed now."""
        if self.at_least is None:
            return None
        left = self._state.acquired + self.at_least - time.monotonic()
        return left if left >= SHORTEST else None

    # --- errors and their order -----------------------------------------------------

    def _busy(self) -> FencingError:
        from .errors import Busy

        return Busy(f'fencing lease "{self.name}" is held by another holder')

    def _cancelled(self) -> Cancelled:
        return Cancelled(f'fencing lease "{self.name}": acquire() was cancelled; nothing is held')

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

    def _check_usable(self, what: str) -> int:
        """The token, or why the lease may not be used: LeaseLost once it is
        lost or past its deadline (after the loss has run)."""
        state = self._state
        if state.token is None:
            raise FencingError(f'{what}: lease "{self.name}" is not acquired')
        if state.lost_reason is None and state.overdue():
            self._lose(state.not_renewed())
        reason = state.lost_reason
        if reason is not None:
            self._await_loss()
            raise LeaseLost(str(reason)) from reason
        return state.token

    def _failure(self, exc: BaseException) -> BaseException:
        """What an error that an operation of the lease met (use(), a
        statement of a batch, renew()) reaches the application as.  FN004:
        LeaseLost, and FN001: StaleToken, both losing the lease; the server
        ending the batch's session for idling past the ttl (25P03):
        LeaseLost; anything else once the lease is lost or past its
        deadline: LeaseLost; else the error as the driver raised it, or
        mapped by its SQLSTATE.  Each after the loss has run, with the
        driver's error as its cause."""
        mapped = exc
        if isinstance(exc, psycopg.Error):
            mapped = translate(exc) or exc
            if mapped is not exc:
                mapped.__cause__ = exc
        if isinstance(mapped, LeaseLost):
            self._lose(mapped)
            return mapped
        if isinstance(mapped, StaleToken):
            self._lose(stale_lost(self.name, mapped))
            return mapped
        if idled_out(exc):
            lost = idle_lost(self.name, self.ttl, exc)
            self._lose(lost)
            return lost
        state = self._state
        if state.token is not None and state.lost_reason is None and state.overdue():
            self._lose(state.not_renewed())
        reason = state.lost_reason
        if state.token is not None and reason is not None:
            self._await_loss()
            lost = LeaseLost(str(reason))
            lost.__cause__ = exc
            return lost
        return mapped

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """Raise an error of an operation of the lease as _failure() says."""
        try:
            yield
        except Exception as exc:
            err = self._failure(exc)
            if err is exc:
                raise
            raise err from exc

    def _arm_watchdog(self) -> None:
        """What the subclass arms to lose the lease at its deadline."""

    def _renewing(self, ttl: Optional[float]) -> List[float]:
        """A renewal for ttl seconds is sent: the deadline may come sooner
        (it may run and set a shorter expiry than the one before)."""
        renewal = self._state.renewing(ttl)
        self._arm_watchdog()
        return renewal

    def _renewed(self, renewal: List[float], expires_at: Any) -> None:
        self._state.renewed(renewal, expires_at)
        self._arm_watchdog()

    def _renewal_failed(self, exc: Exception, interval: float) -> Optional[float]:
        """After a background renewal failed for a reason other than FN004:
        the pause before trying again, or None when the lease may have
        expired.  The first failure of a run of them suspends the lease."""
        if self._state.overdue():
            self._lose(self._state.not_renewed())
            return None
        logger.warning('fencing lease "%s": renewal failed, trying again: %s', self.name, exc)
        if not self.suspended:
            self.suspended = True
            for callback in list(self._on_suspended):
                call_back(callback, self, exc, what="on_suspended")
        return min(interval, RETRY_SECONDS)

    def _renewal_succeeded(self) -> None:
        if self.suspended:
            self.suspended = False
            for callback in list(self._on_resumed):
                call_back(callback, self, what="on_resumed")

    def _deadline_passed(self) -> None:
        """The watchdog ran: lose the lease if its deadline has come.  A
        timer may run a little before its time; it is then set again for
        what is left."""
        if self._state.token is None or self._state.lost_reason is not None:
            return
        if self._state.overdue():
            self._lose(self._state.not_renewed())
        else:
            self._arm_watchdog()

    def _stopping(self) -> None:
        """What the subclass stops when the lease is lost."""

    def _await_loss(self) -> None:
        """Return once the loss has run (another thread may be running it)."""

    def _lose(self, reason: LeaseLost) -> None:
        """Lose the lease, in this order: the flag (``lost.is_set()``), the
        renewal stopped, the on_lost callbacks (one that raises is logged),
        and last the event that ``lost.wait()`` waits for, so whoever wakes
        on it sees what the callbacks did."""
        if not self._state.lose(reason):
            self._await_loss()
            return
        self._losing = threading.get_ident()
        try:
            self._stopping()
            logger.warning("%s", reason)
            for callback in list(self._state.callbacks):
                call_back(callback, self)
        finally:
            self._losing = None
            self.lost.set()
