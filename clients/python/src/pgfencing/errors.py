# Copyright (c) 2026, the fencing developers
"""The exceptions of pgfencing, and how a driver's error becomes one.

Each exception raised from a server error keeps psycopg's error as
``__cause__`` (``raise ... from``), so its ``diag`` stays at hand.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional, Type

import psycopg


class FencingError(Exception):
    """Base class of every pgfencing exception.

    ``sqlstate`` is the server's SQLSTATE when the server raised it, else
    None.
    """

    sqlstate: Optional[str] = None

    def __init__(self, message: str, sqlstate: Optional[str] = None) -> None:
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate


class Busy(FencingError):
    """The name is held by someone else and stayed held for the timeout."""


class Cancelled(FencingError):
    """A waiting acquire() was cancelled (Lease.cancel()); nothing is held."""


class LeaseLost(FencingError):
    """The lease (or the transaction lock) is gone: stop the work.

    Raised for FN004 (expired, released, broken, taken over, lost in a
    crash), when the background renewal could not renew within the ttl,
    when the server ended a batch's session for idling in its transaction
    past the lease's ttl (25P03), for any error an operation of the lease
    meets once the lease is lost or past its deadline (the driver's error
    as ``__cause__``), and, for a transaction lock, when the server ended
    the session that held it (25P03, 25P04, 57P01).  Never reconnect and
    carry on: acquire again to start over.
    """

    sqlstate = "FN004"


class StaleToken(FencingError):
    """FN001: a newer holder wrote first; this write was rejected.  Stop, do
    not retry."""

    sqlstate = "FN001"


class NameCollision(FencingError):
    """FN002: another name with the same 64-bit key is held."""

    sqlstate = "FN002"


class NotPreloaded(FencingError):
    """FN003: fencing is not in shared_preload_libraries on this server."""

    sqlstate = "FN003"


class NotInTransaction(FencingError):
    """The call needs a transaction block (25P01): outside one, the token,
    the lock and the fence would end with the statement."""

    sqlstate = "25P01"


_BY_SQLSTATE: dict[str, Type[FencingError]] = {
    "FN001": StaleToken,
    "FN002": NameCollision,
    "FN003": NotPreloaded,
    "FN004": LeaseLost,
    "25P01": NotInTransaction,
}

# The server ended the session (idle in transaction too long, the
# transaction's time limit, an administrator's pg_terminate_backend): a
# transaction lock ends with it.
SESSION_ENDED = frozenset({"25P03", "25P04", "57P01"})


def idled_out(exc: BaseException) -> bool:
    """Did the server end the session for idling in its transaction past
    its limit (25P03)?  libpq reports the server's FATAL with its
    SQLSTATE when it read it, and its message alone when the connection
    broke while it was read."""
    if not isinstance(exc, psycopg.Error):
        return False
    return exc.sqlstate == "25P03" or "idle-in-transaction timeout" in str(exc)


def _ended_session(exc: psycopg.Error) -> bool:
    """Did this error end the session?  Either the server said why (the
    codes above), or the connection broke before an error could be read
    (libpq's "server closed the connection": no SQLSTATE, or class 08)."""
    state = exc.sqlstate
    if state in SESSION_ENDED:
        return True
    return isinstance(exc, psycopg.OperationalError) and (state is None or state.startswith("08"))


def translate(exc: BaseException, *, lock_held: bool = False) -> Optional[FencingError]:
    """The pgfencing exception for a driver's error, or None when it is not
    one of fencing's.

    With ``lock_held``, an error that ended the session (25P03, 25P04,
    57P01, or a connection that broke) is a LeaseLost: the transaction lock ended with it.  A lease of
    ``acquire_lease`` is held by the server, not by the session, so for it
    they are ordinary errors of the batch.
    """
    if isinstance(exc, FencingError):
        return exc
    if not isinstance(exc, psycopg.Error):
        return None
    state = exc.sqlstate
    cls = _BY_SQLSTATE.get(state or "")
    if cls is None and lock_held and _ended_session(exc):
        cls = LeaseLost
    if cls is None:
        return None
    message = exc.diag.message_primary or str(exc).strip()
    return cls(message, state)


@contextlib.contextmanager
def translated(*, lock_held: bool = False) -> Iterator[None]:
    """Raise fencing's server errors inside the block as pgfencing
    exceptions (the driver's error as ``__cause__``); others pass as they
    are."""
    try:
        yield
    except psycopg.Error as exc:
        mapped = translate(exc, lock_held=lock_held)
        if mapped is None:
            raise
        raise mapped from exc
