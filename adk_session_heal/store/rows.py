"""Rows of ADK's events tables, built exactly as ADK's own services build them.

ADK 2.13 has two SQL layouts under the same table names:

* ``DatabaseSessionService`` (schema version "1"): ``timestamp`` is a naive UTC
  datetime with microseconds, ``event_data`` the event as a JSON dict
  (``Event.model_dump(exclude_none=True, mode="json")``; JSONB on PostgreSQL,
  text elsewhere), built by ``StorageEvent.from_event``.
* ``SqliteSessionService``: ``timestamp`` is a REAL, ``event_data`` the text of
  ``Event.model_dump_json(exclude_none=True)``.

The wrapper and the repair CLI both write synthetic events through these
functions, so a row is the same whichever of them wrote it.
"""

from __future__ import annotations

from typing import Any, cast

from google.adk.events.event import Event
from google.adk.sessions.schemas.shared import timestamp_to_utc_datetime
from google.adk.sessions.schemas.v1 import StorageEvent
from sqlalchemy import Table

__all__ = [
    "DATABASE_EVENTS_TABLE",
    "SQLITE_EVENT_COLUMNS",
    "database_event_row",
    "sqlite_event_row",
]

DATABASE_EVENTS_TABLE: Table = cast(Table, StorageEvent.__table__)
"""ADK's ``events`` table (schema "1"), with ADK's own column types."""

SQLITE_EVENT_COLUMNS = (
    "id",
    "app_name",
    "user_id",
    "session_id",
    "invocation_id",
    "timestamp",
    "event_data",
)
"""Column order of ``SqliteSessionService``'s ``events`` table inserts."""


def database_event_row(
    event: Event, *, app_name: str, user_id: str, session_id: str
) -> dict[str, Any]:
    """Returns the ``events`` row ``DatabaseSessionService`` would store for ``event``.

    The ``timestamp`` column and the JSON ``timestamp`` hold the same instant:
    ADK reads the JSON one but orders by the column.
    """
    return {
        "id": event.id,
        "app_name": app_name,
        "user_id": user_id,
        "session_id": session_id,
        "invocation_id": event.invocation_id,
        "timestamp": timestamp_to_utc_datetime(event.timestamp),
        "event_data": event.model_dump(exclude_none=True, mode="json"),
    }


def sqlite_event_row(
    event: Event, *, app_name: str, user_id: str, session_id: str
) -> tuple[Any, ...]:
    """Returns the ``events`` row ``SqliteSessionService`` would store for ``event``.

    Values are in :data:`SQLITE_EVENT_COLUMNS` order.
    """
    return (
        event.id,
        app_name,
        user_id,
        session_id,
        event.invocation_id,
        event.timestamp,
        event.model_dump_json(exclude_none=True),
    )
