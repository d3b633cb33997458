"""ADK's ``events`` table (``DatabaseSessionService``, schema "1") and the rows written to it.

ADK's own model of the table is imported by the first write, not by a scan
(:func:`events_table`; :data:`DATABASE_EVENTS_TABLE` on first access). The
rows: an event as the installed ``DatabaseSessionService`` stores it
(:func:`database_event_row`), a heal placed right after its anchor row
(:func:`heal_row`), inserted keeping any row that holds the key
(:func:`insert_database_events_batch`); a stored row read back as an
``Event`` (:func:`to_event`).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Table

from ...core.adk_compat import timestamp_to_column
from ...core.healing import Heal
from ...core.session_key import SessionKey
from ..dialects import insert_new_rows

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from sqlalchemy.ext.asyncio import AsyncConnection


@functools.cache
def events_table() -> Table:
    """ADK's ``events`` table, from ADK's own model: imported by the first write, not by a scan."""
    from google.adk.sessions.schemas.v1 import StorageEvent

    return cast(Table, StorageEvent.__table__)


def load_events_table() -> None:
    """Loads ADK's model of ``events`` (a background thread's work, see ``preload_writer``).

    A failure is left for the first write, which raises it where it is handled.
    """
    with contextlib.suppress(Exception):
        events_table()


if TYPE_CHECKING:  # computed on first access, by __getattr__ below
    DATABASE_EVENTS_TABLE: Table
    """ADK's ``events`` table (schema "1"), with ADK's own column types."""


def __getattr__(name: str) -> Any:
    """Builds :data:`DATABASE_EVENTS_TABLE` on first use (it loads ADK's storage schema).

    Raises:
        AttributeError: Any other name.
    """
    if name == "DATABASE_EVENTS_TABLE":
        return events_table()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
