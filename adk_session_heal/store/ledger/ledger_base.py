"""What the ledgers share: opening one over SQL or Redis, and the heal ledgers' ``history``.

:class:`SqlLedger` is the SQL heal ledger's and tool-run ledger's engine (opened
from a URL or shared, disposed on ``close`` only when its own) and their read of
the ledger's revision; :class:`RedisLedger` is the Redis ledgers' client (opened
from a URL or a ``RedisSessionService``'s, closed only when its own).
:class:`HealHistory` is the heal ledgers' one ``history`` signature, each
ledger reading its own store.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self

from ...core.heal_record import HealRecord
from ...errors import LedgerError
from ..driver_errors import CONNECT_ERRORS, translate_error
from ..engines import TimeoutArg, Timeouts, create_store_engine
from ..redis_clients import close_client, redis_client_for
from ..urls import REDIS_KEY_PREFIX, StoreUrl, parse_store_url
from .heal_table import read_ledger_revision

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


class SqlLedger:
    """A ledger in a SQL database: its engine, and the URL it was opened from.

    Args:
        engine: An async engine on the database holding the ledger (e.g. the
            ``db_engine`` of a ``DatabaseSessionService``).
        owns_engine: Dispose the engine on :meth:`close`.
    """

    _unnamed = "the ledger database"
    """How errors name the database when the ledger was given an engine, not a URL."""

    def __init__(self, engine: AsyncEngine, *, owns_engine: bool = False) -> None:
        self.engine = engine
        self._owns_engine = owns_engine
        self._url: StoreUrl | None = None

    @classmethod
    def _open(cls, url: str | StoreUrl, *, timeout: TimeoutArg, writable: bool,
              engine: AsyncEngine | None) -> Self:
        """Opens the ledger of the database at ``url`` (any accepted form).

        Args:
            url: The session database.
            timeout: How long to wait for a database server (see
                :func:`~adk_session_heal.store.open_store`).
            writable: Open a SQLite file for writing.
            engine: An engine already open on that database, to share (not
                disposed on :meth:`close`); ``None``: the ledger opens its own.

        Raises:
            UnsupportedStoreError: The URL is not one this package reads.
        """
        store_url = url if isinstance(url, StoreUrl) else parse_store_url(url)
        owns = engine is None
        if engine is None:
            engine = create_store_engine(store_url, writable=writable,
                                         timeouts=Timeouts.of(timeout))
        ledger = cls(engine, owns_engine=owns)
        ledger._url = store_url
        return ledger

    def _where(self) -> str:
        """The database as errors name it: its URL, else :attr:`_unnamed`."""
        return str(self._url) if self._url else self._unnamed

    async def revision(self) -> str | None:
        """Returns the ledger's migration revision (``None``: not installed).

        Raises:
            StoreError: The database could not be read (the driver's error in one line).
            LedgerError: The same, for a ledger given an engine rather than a URL.
        """
        try:
            async with self.engine.connect() as conn:
                return await read_ledger_revision(conn)
        except CONNECT_ERRORS as exc:
            if self._url is None:
                raise LedgerError(f"cannot read the ledger: {type(exc).__name__}") from exc
            raise translate_error(exc, self._url, "read") from exc

    async def close(self) -> None:
        """Disposes the engine if this ledger created it."""
        if self._owns_engine:
            await self.engine.dispose()


class RedisLedger:
    """A ledger beside ADK's Redis sessions: its client and ADK's key prefix.

    Args:
        client: A ``redis.asyncio`` client.
        key_prefix: ADK's key prefix of the sessions.
        owns_client: Close the client on :meth:`close`.
    """

    def __init__(self, client: Any, *, key_prefix: str = REDIS_KEY_PREFIX,
                 owns_client: bool = False) -> None:
        self._client = client
        self.key_prefix = key_prefix
        self._owns_client = owns_client

    @classmethod
    def from_service(cls, service: Any) -> Self:
        """The ledger beside a ``RedisSessionService``'s sessions, over its client."""
        return cls(service._get_redis(), key_prefix=service.config.key_prefix)

    @classmethod
    def from_url(cls, url: str | StoreUrl) -> Self:
        """Opens the ledger of a ``redis://`` store URL."""
        client, key_prefix = redis_client_for(url)
        return cls(client, key_prefix=key_prefix, owns_client=True)

    async def close(self) -> None:
        """Closes the client if this ledger opened it."""
        if self._owns_client:
            await close_client(self._client)


class HealHistory(abc.ABC):
    """The heal ledgers' ``history``: the filters taken once, the reading each ledger's own."""

    async def history(
        self,
        *,
        app_name: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        limit: int | None = None,
    ) -> list[HealRecord]:
        """Returns recorded heals, oldest first, optionally filtered.

        Args:
            app_name: Only this app's heals.
            user_id: Only this user's heals.
            session_id: Only this session id's heals.
            limit: At most this many (the oldest).

        Raises:
            LedgerError: The SQL ledger is not installed or out of date.
        """
        wanted = {name: value for name, value in (
            ("app_name", app_name), ("user_id", user_id), ("session_id", session_id))
            if value is not None}
        return await self._history(wanted, limit)

    @abc.abstractmethod
    async def _history(self, wanted: Mapping[str, str], limit: int | None) -> list[HealRecord]:
        """Returns the recorded heals whose fields have the ``wanted`` values, oldest first.

        Args:
            wanted: ``app_name``, ``user_id`` and ``session_id`` values asked for.
            limit: At most this many (the oldest); ``None``: all.
        """
