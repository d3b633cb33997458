"""Heal writers: persist synthetic events for one session service, safely.

The wrapper must never make a runner on the same session fail. ADK's
``append_event`` bumps the session's revision (``sessions.update_time``), and
a runner that loaded the session before the bump fails its next append with
``StaleSessionError``. So for ADK's own stores a heal is written beside
``append_event``, not through it:

==========================  ===================================================
``DatabaseSessionService``  one ``INSERT`` per heal into ``events`` (schema
                            "1"), the row exactly as ADK builds it, placed by
                            timestamp right after its call; ``sessions`` is not
                            touched, so no revision changes.
``SqliteSessionService``    the same, in ADK's own SQLite layout.
``InMemorySessionService``  the event is inserted into the stored session's
                            list right after its call; ``last_update_time`` is
                            left alone.
anything else               through the service's ``append_event`` on the
                            caller's session object (the only write API it
                            has). This bumps the revision, so from
                            ``get_session`` it runs only when the session is
                            quiet (see ``HealPolicy.quiet_after``).
==========================  ===================================================

Deduplication is by storage, not memory: heal ids are deterministic, the
inserts skip an existing primary key, and when another healer's row won the
race the stored row is read back and used.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from google.adk.events.event import Event
from google.adk.sessions import (
    BaseSessionService,
    DatabaseSessionService,
    InMemorySessionService,
    Session,
)
from google.adk.sessions.schemas.v1 import StorageEvent
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from ..healing import HealPlan
from .inserts import insert_database_events, insert_sqlite_events
from .rows import DATABASE_EVENTS_TABLE, database_event_row, sqlite_event_row

__all__ = [
    "AppendWriter",
    "DatabaseWriter",
    "HealWriter",
    "InMemoryWriter",
    "SqliteWriter",
    "writer_for",
]

_JSON_SCHEMA_VERSION = "1"


class HealWriter(abc.ABC):
    """Writes planned heals of one session to storage.

    Attributes:
        bumps_revision: Whether a write changes the session's stored revision
            (only the generic :class:`AppendWriter` does).
    """

    bumps_revision = False

    @abc.abstractmethod
    async def write(
        self, session: Session, plans: Sequence[HealPlan], events: Sequence[Event]
    ) -> list[tuple[Event, bool]]:
        """Persists the heal events.

        Args:
            session: The session the heals belong to (not modified here).
            plans: The planned heals.
            events: The synthetic events, one per plan, in the same order.

        Returns:
            Per plan: the event storage now holds for it (ours, or the row of a
            healer that won a race), and whether this call wrote it.
        """


class DatabaseWriter(HealWriter):
    """Inserts heal rows into a ``DatabaseSessionService`` database (schema "1")."""

    def __init__(self, service: DatabaseSessionService) -> None:
        self._service = service

    async def write(
        self, session: Session, plans: Sequence[HealPlan], events: Sequence[Event]
    ) -> list[tuple[Event, bool]]:
        """Inserts the rows in one transaction; reads back rows another healer won."""
        rows = [
            database_event_row(
                event, app_name=session.app_name, user_id=session.user_id, session_id=session.id
            )
            for event in events
        ]
        async with self._service.db_engine.begin() as conn:
            written = await insert_database_events(conn, rows)
        lost = [event.id for event, ok in zip(events, written, strict=True) if not ok]
        stored = await self._read_back(session, lost) if lost else {}
        return [
            (event if ok else stored.get(event.id, event), ok)
            for event, ok in zip(events, written, strict=True)
        ]

    async def _read_back(self, session: Session, ids: Sequence[str]) -> dict[str, Event]:
        table = DATABASE_EVENTS_TABLE
        statement = select(StorageEvent).where(
            table.c.app_name == session.app_name,
            table.c.user_id == session.user_id,
            table.c.session_id == session.id,
            table.c.id.in_(ids),
        )
        async with AsyncSession(self._service.db_engine) as orm:
            result = await orm.execute(statement)
            return {row.id: row.to_event() for row in result.scalars()}


class SqliteWriter(HealWriter):
    """Inserts heal rows into an ADK ``SqliteSessionService`` database."""

    def __init__(self, service: SqliteSessionService) -> None:
        self._service = service

    async def write(
        self, session: Session, plans: Sequence[HealPlan], events: Sequence[Event]
    ) -> list[tuple[Event, bool]]:
        """Inserts the rows in one transaction; reads back rows another healer won."""
        rows = [
            sqlite_event_row(
                event, app_name=session.app_name, user_id=session.user_id, session_id=session.id
            )
            for event in events
        ]
        # ADK's own connection helper: it applies the service's pragmas and also
        # serves the ":memory:" form, whose database lives in that one connection.
        async with self._service._get_db_connection() as db:
            written = await insert_sqlite_events(db, rows)
            await db.commit()
            stored: dict[str, Event] = {}
            for event, ok in zip(events, written, strict=True):
                if ok:
                    continue
                cursor = await db.execute(
                    "SELECT event_data FROM events WHERE app_name=? AND user_id=?"
                    " AND session_id=? AND id=?",
                    (session.app_name, session.user_id, session.id, event.id),
                )
                row = await cursor.fetchone()
                await cursor.close()
                if row is not None:
                    stored[event.id] = Event.model_validate_json(row[0])
        return [
            (event if ok else stored.get(event.id, event), ok)
            for event, ok in zip(events, written, strict=True)
        ]


class InMemoryWriter(HealWriter):
    """Inserts heal events into an ``InMemorySessionService``'s stored session."""

    def __init__(self, service: InMemorySessionService) -> None:
        self._service = service

    async def write(
        self, session: Session, plans: Sequence[HealPlan], events: Sequence[Event]
    ) -> list[tuple[Event, bool]]:
        """Inserts each event after its call event, unless one with its id is there."""
        stored_session = (
            self._service.sessions.get(session.app_name, {})
            .get(session.user_id, {})
            .get(session.id)
        )
        if stored_session is None:
            raise LookupError(f"session {session.id!r} is not in the in-memory store")
        stored = stored_session.events
        by_id = {event.id: event for event in stored}
        result: list[tuple[Event, bool]] = []
        for plan, event in zip(plans, events, strict=True):
            existing = by_id.get(event.id)
            if existing is not None:
                result.append((existing, False))
                continue
            position = next(
                (i + 1 for i, e in enumerate(stored) if e.id == plan.call_event_id),
                len(stored),
            )
            stored.insert(position, event)
            by_id[event.id] = event
            result.append((event, True))
        return result


class AppendWriter(HealWriter):
    """Writes heals through ``append_event``, for any other session service.

    The events are appended after everything the caller's session holds, with
    timestamps just after its newest event.
    """

    bumps_revision = True

    def __init__(self, service: BaseSessionService) -> None:
        self._service = service

    async def write(
        self, session: Session, plans: Sequence[HealPlan], events: Sequence[Event]
    ) -> list[tuple[Event, bool]]:
        """Appends each event via the service (the caller skips ids already present)."""
        result: list[tuple[Event, bool]] = []
        newest = session.events[-1].timestamp if session.events else 0.0
        for event in events:
            newest = max(newest + 1e-6, event.timestamp)
            appended = event.model_copy(update={"timestamp": newest})
            stored = await self._service.append_event(session, appended)
            result.append((stored, True))
        return result


def writer_for(service: BaseSessionService) -> HealWriter:
    """Returns the writer for a session service (see the module docstring)."""
    if isinstance(service, DatabaseSessionService):
        if getattr(service, "_db_schema_version", None) == _JSON_SCHEMA_VERSION:
            return DatabaseWriter(service)
        return AppendWriter(service)
    if isinstance(service, SqliteSessionService):
        return SqliteWriter(service)
    if isinstance(service, InMemorySessionService):
        return InMemoryWriter(service)
    return AppendWriter(service)
