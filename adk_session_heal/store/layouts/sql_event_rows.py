"""ADK's ``events`` table (``DatabaseSessionService``, schema "1") and the rows written to it.

The table (:func:`events_table`) is this package's own twin of ADK's
``StorageEvent`` model: the same name, columns, key and column types, whose
values bind exactly as ADK's ``DynamicJSON`` and ``PreciseTimestamp`` bind
them in every supported ADK (a dict for PostgreSQL's ``JSONB``,
``json.dumps`` text elsewhere; a naive ``DateTime``, ``DATETIME(6)`` on
MySQL/MariaDB) and read back as ADK 2.x reads them (which, unlike 1.x, also
takes a number in the timestamp column). A writer needs only that,
and loading ADK's model means importing ADK's events, models and
``google.genai`` first (0.9 s measured, a fifth of a CLI repair of 10,000
heals). Its tests hold it to the installed ADK's model: the same DDL on every
dialect, and byte-identical stored rows on SQLite, PostgreSQL and MariaDB.

The rows: an event as the installed ``DatabaseSessionService`` stores it
(:func:`database_event_row`), a heal placed right after its anchor row
(:func:`heal_row`), inserted keeping any row that holds the key
(:func:`insert_database_events_batch`); a stored row read back as an
``Event`` (:func:`to_event`, which does load ADK's model).
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    DateTime,
    Dialect,
    ForeignKeyConstraint,
    Index,
    MetaData,
    String,
    Table,
    Text,
    desc,
    func,
)
from sqlalchemy.types import TypeDecorator, TypeEngine

from ...core.adk_compat import timestamp_to_column
from ...core.healing import Heal
from ...core.session_key import SessionKey
from ..dialects import insert_new_rows

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from sqlalchemy.ext.asyncio import AsyncConnection

_KEY_LENGTH = 128
"""ADK's ``DEFAULT_MAX_KEY_LENGTH``: the key columns' length."""
_VARCHAR_LENGTH = 256
"""ADK's ``DEFAULT_MAX_VARCHAR_LENGTH``: ``invocation_id``'s length."""


class _EventData(TypeDecorator[Any]):
    """ADK's ``DynamicJSON``: ``JSONB`` on PostgreSQL, ``json.dumps`` text elsewhere."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        """``JSONB`` on PostgreSQL, ``LONGTEXT`` on MySQL/MariaDB, ``TEXT`` elsewhere."""
        from sqlalchemy.dialects import mysql, postgresql  # 35 ms: a scan loads this module

        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.JSONB())
        if dialect.name == "mysql":
            return dialect.type_descriptor(mysql.LONGTEXT())
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        """The dict itself for ``JSONB``; ``json.dumps`` of it for a text column."""
        if value is None or dialect.name == "postgresql":
            return value
        return json.dumps(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        """The decoded object (``ValueError`` for a text column that is not JSON)."""
        if value is None or dialect.name == "postgresql":
            return value
        try:
            return json.loads(value)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"Invalid JSON in event_data: {exc}") from exc


class _Timestamp(TypeDecorator[datetime.datetime]):
    """ADK's ``PreciseTimestamp``: a naive ``DateTime``, to the microsecond on MySQL/MariaDB."""

    impl = DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        """``DATETIME(6)`` on MySQL/MariaDB, ``DateTime`` elsewhere."""
        from sqlalchemy.dialects import mysql

        if dialect.name == "mysql":
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return self.impl_instance

    def result_processor(
        self, dialect: Dialect, coltype: object
    ) -> Callable[[object], datetime.datetime | None]:
        """Reads the column as ADK 2.x does: a number (POSIX seconds) as an aware UTC time."""
        impl_processor = self.impl_instance.result_processor(dialect, coltype)

        def process(value: object) -> datetime.datetime | None:
            if value is None:
                return None
            if isinstance(value, int | float):
                return datetime.datetime.fromtimestamp(value, datetime.UTC)
            if impl_processor:
                value = impl_processor(value)
            return value  # type: ignore[return-value]

        return process


@functools.cache
def events_table() -> Table:
    """ADK's ``events`` table (schema "1"): this package's twin of ADK's model, see above."""
    metadata = MetaData()
    Table(  # only for the foreign key's target; ADK's sessions table has more columns
        "sessions", metadata,
        Column("app_name", String(_KEY_LENGTH), primary_key=True),
        Column("user_id", String(_KEY_LENGTH), primary_key=True),
        Column("id", String(_KEY_LENGTH), primary_key=True),
    )
    return Table(
        "events", metadata,
        Column("id", String(_KEY_LENGTH), primary_key=True),
        Column("app_name", String(_KEY_LENGTH), primary_key=True),
        Column("user_id", String(_KEY_LENGTH), primary_key=True),
        Column("session_id", String(_KEY_LENGTH), primary_key=True),
        Column("invocation_id", String(_VARCHAR_LENGTH), nullable=False),
        Column("timestamp", _Timestamp(), nullable=False, default=func.now()),
        Column("event_data", _EventData(), nullable=True),
        ForeignKeyConstraint(["app_name", "user_id", "session_id"],
                             ["sessions.app_name", "sessions.user_id", "sessions.id"],
                             ondelete="CASCADE"),
        Index("idx_events_app_user_session_ts_id", "app_name", "user_id", "session_id",
              desc("timestamp"), desc("id")),
    )


_EVENT_KEY = ("app_name", "user_id", "session_id", "id")


def database_event_row(
    event: Event, *, app_name: str, user_id: str, session_id: str
) -> dict[str, Any]:
    """Returns the ``events`` row the installed ``DatabaseSessionService`` stores for ``event``.

    The ``timestamp`` column and the JSON ``timestamp`` hold the same instant,
    in the installed ADK's convention (naive local time up to 2.6, naive UTC
    from 2.7): ADK 2.7+ reads the JSON one, earlier ones the column, and all
    order by the column.
    """
    return {
        "id": event.id,
        "app_name": app_name,
        "user_id": user_id,
        "session_id": session_id,
        "invocation_id": event.invocation_id,
        "timestamp": timestamp_to_column(event.timestamp),
        "event_data": event.model_dump(exclude_none=True, mode="json"),
    }


def heal_row(
    key: SessionKey, heal: Heal, anchor_column: datetime.datetime | None
) -> dict[str, Any]:
    """Returns the ``events`` row of a heal, placed right after its anchor row.

    The ``timestamp`` column is the anchor row's own value (the call's, see
    :attr:`~adk_session_heal.core.heal_plan.HealPlan.anchor_event_id`) plus the
    heal's distance from it, whichever convention (local or UTC, see
    :mod:`~adk_session_heal.core.adk_compat`) and zone its writer used, so the heal
    sorts right after it for every reader, under any ``TZ``.

    Args:
        key: The heal's session.
        heal: The heal.
        anchor_column: The anchor row's ``timestamp`` column as stored, or
            ``None`` when that row was not found (the installed ADK's
            convention is used then).
    """
    plan = heal.plan
    if anchor_column is None:
        column = timestamp_to_column(plan.timestamp)
    else:
        # At least 1 µs: the anchor's JSON time may carry sub-µs digits the column lost.
        after = max(1, round((plan.timestamp - plan.anchor_timestamp) * 1_000_000))
        column = anchor_column.replace(tzinfo=None) + datetime.timedelta(microseconds=after)
    return {
        "id": plan.event_id,
        "app_name": key.app_name,
        "user_id": key.user_id,
        "session_id": key.session_id,
        "invocation_id": plan.invocation_id,
        "timestamp": column,
        "event_data": heal.data,
    }


async def insert_database_events_batch(
    conn: AsyncConnection, rows: Sequence[dict[str, Any]]
) -> list[bool | None]:
    """Inserts ``DatabaseSessionService`` event rows, keeping any row that holds the key.

    See :func:`~adk_session_heal.store.dialects.insert_new_rows`: batched on
    PostgreSQL and SQLite, one by one on MySQL/MariaDB; only an existing key
    counts as present (and, on MySQL/MariaDB, a deleted session as gone), any
    other error is raised.

    Args:
        conn: A connection inside the caller's transaction.
        rows: Rows from :func:`database_event_row` or :func:`heal_row`.

    Returns:
        For each row, whether this call wrote it (``None``: its session is gone).
    """
    return await insert_new_rows(conn, events_table(), rows, _EVENT_KEY)


def to_event(row: Any) -> Event:
    """Returns the ``Event`` of an ``events`` row, as ``StorageEvent.to_event`` reads it."""
    from google.adk.sessions.schemas.v1 import StorageEvent

    storage = StorageEvent(**{c.name: getattr(row, c.name) for c in events_table().columns})
    return storage.to_event()
