"""How long to wait for a database server, and the engines that wait no longer.

Every engine this package opens from a URL comes from :func:`create_store_engine`:

* **connect**: the whole connection set-up (TCP, TLS, the server's greeting,
  authentication) must finish within :attr:`Timeouts.connect` seconds, on
  every driver. A server that accepts the connection and never answers is an
  error after that time, not a hang (aiomysql's own ``connect_timeout`` covers
  only the TCP handshake).
* **statement**: PostgreSQL (asyncpg ``command_timeout``) and asyncmy
  (``read_timeout``) give up on a statement, or a fetch of a streamed result,
  that takes longer than :attr:`Timeouts.statement`. aiomysql has no such
  option: over ``mysql+aiomysql://`` only the connect timeout applies.
* SQLite files keep the driver's busy timeout (5 s).

Engines a session service owns (the wrapper writes through ADK's own engine)
are never changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import event

from ..core.shards import SQLITE_FUNCTION, bucket
from ..errors import UnsupportedStoreError
from .driver_errors import import_driver
from .json_decode import loads as json_loads
from .urls import StoreUrl

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to wait for a database server to accept a connection and log in."""

DEFAULT_STATEMENT_TIMEOUT = 60.0
"""Seconds to wait for one statement (or one fetch of a streamed result)."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long to wait for a database server.

    Attributes:
        connect: Seconds for connecting and logging in.
        statement: Seconds for one statement or one fetch.
    """

    connect: float = DEFAULT_CONNECT_TIMEOUT
    statement: float = DEFAULT_STATEMENT_TIMEOUT

    @classmethod
    def of(cls, value: TimeoutArg) -> Timeouts:
        """Returns the timeouts a ``timeout=`` argument asks for.

        Args:
            value: ``None`` (the defaults), one number of seconds (both
                timeouts), or a :class:`Timeouts`.

        Raises:
            UnsupportedStoreError: A number that is not positive.
        """
        if value is None:
            return cls()
        if isinstance(value, Timeouts):
            return value
        if not value > 0:
            raise UnsupportedStoreError(
                f"a timeout must be a positive number of seconds, not {value!r}"
            )
        return cls(float(value), float(value))


TimeoutArg = float | Timeouts | None
"""What a ``timeout=`` argument takes: see :meth:`Timeouts.of`."""


def _bounded(connect: Callable[..., Awaitable[Any]], seconds: float) -> Callable[..., Any]:
    """Returns ``connect`` with its whole set-up limited to ``seconds``."""

    async def connect_within(*args: Any, **kwargs: Any) -> Any:
        async with asyncio.timeout(seconds):
            return await connect(*args, **kwargs)

    return connect_within


def _sqlite_functions(dbapi_connection: Any, _record: object) -> None:
    """Registers the SQL functions our queries use (the shard hash) on a new SQLite connection."""
    dbapi_connection.create_function(SQLITE_FUNCTION, 3, bucket, deterministic=True)


def create_store_engine(url: StoreUrl, *, writable: bool, timeouts: Timeouts) -> AsyncEngine:
    """Returns the async engine for a SQL store URL, with the timeouts applied.

    Args:
        url: A SQLite, PostgreSQL or MySQL/MariaDB store URL.
        writable: Open SQLite files for writing (see :meth:`StoreUrl.sqlalchemy_url`).
        timeouts: How long to wait for a server.
    """
    # SQLAlchemy's asyncio extension loads its ORM (about 55 ms): a SQLite scan opens no engine.
    from sqlalchemy.ext.asyncio import create_async_engine

    sqlalchemy_url = url.sqlalchemy_url(writable=writable)
    if url.sqlite_path is not None:
        engine = create_async_engine(sqlalchemy_url)
        event.listen(engine.sync_engine, "connect", _sqlite_functions)
        return engine
    driver = sqlalchemy_url.get_driver_name()
    connect_args: dict[str, Any] = {
        # SQLAlchemy's async dialects call this instead of the driver's connect.
        # A driver that is not installed is named with its extra (driver_errors.import_driver).
        "async_creator_fn": _bounded(import_driver(driver, url).connect, timeouts.connect),
    }
    if driver == "asyncpg":
        connect_args["timeout"] = timeouts.connect
        connect_args["command_timeout"] = timeouts.statement
    elif driver == "asyncmy":
        connect_args["connect_timeout"] = timeouts.connect
        connect_args["read_timeout"] = timeouts.statement
    else:
        connect_args["connect_timeout"] = timeouts.connect
    if driver == "asyncpg":  # asyncpg hands json/jsonb values decoded, with this
        return create_async_engine(sqlalchemy_url, connect_args=connect_args,
                                   json_deserializer=json_loads)
    return create_async_engine(sqlalchemy_url, connect_args=connect_args)
