# Copyright (c) 2026, the fencing developers
"""pgfencing: leases and locks of the PostgreSQL extension fencing, held
the way redis-py holds a lock, with a fence token the database checks.

    from psycopg_pool import ConnectionPool
    import pgfencing

    with pgfencing.Lease(pool, "invoice-run:2026-10", ttl=30) as lease:
        for batch in batches:
            with pool.connection() as conn, lease.transaction(conn):
                ...   # each write is fenced with lease.token

The asyncio twin is pgfencing.aio.
"""

from .errors import (
    Busy,
    Cancelled,
    FencingError,
    LeaseLost,
    NameCollision,
    NotInTransaction,
    NotPreloaded,
    StaleToken,
    translate,
    translated,
)
from .lease import Lease, lock, try_lock

__version__ = "1.2.0"

__all__ = [
    "Busy",
    "Cancelled",
    "FencingError",
    "Lease",
    "LeaseLost",
    "NameCollision",
    "NotInTransaction",
    "NotPreloaded",
    "StaleToken",
    "lock",
    "translate",
    "translated",
    "try_lock",
]
