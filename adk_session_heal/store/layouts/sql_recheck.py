"""What a ``DatabaseSessionService`` write transaction reads before it inserts.

First, on PostgreSQL, the planned sessions held so that a delete waits for
the write (:func:`hold_sessions`); then, in one statement, each planned
session's events re-counted and each heal's anchor row's ``timestamp``
column read (:func:`recheck`), which the write decides on.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import String, TextClause, bindparam, func, literal, null, select, text, union_all
from sqlalchemy.exc import DBAPIError

from ...core.healing import SessionHeals
from ...core.session_key import SessionKey
from ..batch_outcomes import discount_planned
from .sql_event_rows import events_table

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


@functools.cache
def _pg_recheck() -> TextClause:
    """PostgreSQL's re-check: one index range per session (5x faster than ``IN`` lists there),
    and each row looked up by its whole key. An event id is unique only within its session
    (ADK's key is app, user, session and id): ``id = ANY(...)`` read every session's rows of
    an id that many sessions share (20,000 rows for a batch of 500 sessions numbering their
    events alike, 93 ms; by whole key 1,000 rows, 18 ms, measured)."""
    from sqlalchemy.dialects.postgresql import ARRAY  # loaded by the first PostgreSQL write

    return text("""
SELECT e.app_name, e.user_id, e.session_id, 0 AS events, e.id, e.timestamp
FROM unnest(:row_apps, :row_users, :row_sids, :ids) AS r(app, usr, sid, eid)
JOIN events e
  ON e.app_name = r.app AND e.user_id = r.usr AND e.session_id = r.sid AND e.id = r.eid
UNION ALL
SELECT k.app, k.usr, k.sid,
  (SELECT count(*) FROM events e
    WHERE e.app_name = k.app AND e.user_id = k.usr AND e.session_id = k.sid),
  NULL, NULL
FROM unnest(:apps, :users, :sids) AS k(app, usr, sid)
""").bindparams(*(
        bindparam(name, type_=ARRAY(String))
        for name in ("apps", "users", "sids", "row_apps", "row_users", "row_sids", "ids")
    ))


@functools.cache
def _pg_hold() -> TextClause:
    """PostgreSQL: holds the planned sessions' rows until the write ends (:func:`hold_sessions`)."""
    from sqlalchemy.dialects.postgresql import ARRAY

    return text("""
SELECT 1 FROM sessions s JOIN unnest(:apps, :users, :sids) AS k(app, usr, sid)
  ON s.app_name = k.app AND s.user_id = k.usr AND s.id = k.sid
ORDER BY s.app_name, s.user_id, s.id FOR KEY SHARE OF s
""").bindparams(
        *(bindparam(name, type_=ARRAY(String)) for name in ("apps", "users", "sids")))


_PG_NO_PRIVILEGE = "42501"
"""PostgreSQL's insufficient_privilege."""


async def hold_sessions(conn: AsyncConnection, batch: Sequence[SessionHeals]) -> None:
    """Keeps the planned sessions from being deleted until the write transaction ends.

    PostgreSQL checks an inserted row's foreign key at the end of the
    statement: a session deleted by its application (``delete_session``)
    after the re-count failed the whole batch's insert ("violates foreign key
    constraint"). Locking each session row ``FOR KEY SHARE`` first (the lock
    that check takes anyway) makes the re-count that follows final: a session
    deleted before it has no events there and is skipped as gone. Reads go on;
    a delete, and ADK's ``append_event`` (which locks the row ``FOR UPDATE``
    from ADK 1.28 on), wait until this transaction ends, so an event appended
    meanwhile comes after the heals and one appended before is in the
    re-count. A role without the UPDATE privilege on ``sessions`` (which row
    locks need) writes without the hold; a session deleted under its insert
    then fails the transaction, which runs again (see
    :meth:`~adk_session_heal.store.layouts.sql_tables.SqlTablesStore.write`).

    SQLite's write lock already excludes the delete; on MySQL/MariaDB, whose
    foreign-key check locks the session as each row is inserted, a session
    gone by then is skipped row by row
    (:func:`~adk_session_heal.store.dialects.insert_new_rows`): holding it from
    the start would make ADK's delete, which locks the session's events first,
    deadlock with the insert.
    """
    if conn.dialect.name != "postgresql" or not batch:
        return
    keys = sorted({s.key for s in batch})
    try:
        async with conn.begin_nested():
            await conn.execute(_pg_hold(), {"apps": [k.app_name for k in keys],
                                          "users": [k.user_id for k in keys],
                                          "sids": [k.session_id for k in keys]})
    except DBAPIError as exc:
        # A row lock needs the UPDATE privilege on the table: a role that may only
        # insert events writes without the hold, and a session deleted under its
        # insert fails the transaction, which runs again (lost_race).
        if getattr(exc.orig, "sqlstate", None) != _PG_NO_PRIVILEGE:
            raise


@dataclass(frozen=True, slots=True)
class Recheck:
    """What a write transaction reads before it inserts.

    Attributes:
        counts: Each re-checked session's events now, less its planned heals
            already stored (see :func:`~adk_session_heal.store.batch_outcomes.discount_planned`).
        anchor_columns: The stored ``timestamp`` column of each planned heal's
            anchor row (usually its call's), by session and event id.
    """

    counts: dict[SessionKey, int]
    anchor_columns: dict[tuple[SessionKey, str], datetime.datetime]


async def recheck(conn: AsyncConnection, batch: Sequence[SessionHeals]) -> Recheck:
    """Reads, in one statement of ``conn``'s transaction, what the write decides on.

    Counts each re-checked session's events (a planned heal already stored,
    written by a racing healer, is not counted: the session is as planned, and
    the insert will find the heal present) and reads each anchor row's
    ``timestamp`` column, so the heal is placed relative to it. One statement,
    so all parts see the same snapshot. Rows of other sessions a filter lets
    through are ignored.

    PostgreSQL applies an ``IN`` list on ``session_id`` as a filter over the
    app and user's whole index range (every event of the app, measured), so
    there each session is counted over its own range and each row read by its
    whole key; elsewhere plain ``IN`` lists, which SQLite and MySQL serve from
    the session index.
    """
    checking = [s for s in batch if s.seen_events is not None]
    heal_ids = {(s.key, heal.event_id) for s in batch for heal in s.heals}
    anchor_ids = {(s.key, heal.plan.anchor_event_id) for s in batch for heal in s.heals}
    if conn.dialect.name == "postgresql":
        wanted = list(heal_ids | anchor_ids)
        rows = await conn.execute(_pg_recheck(), {
            "apps": [s.key.app_name for s in checking],
            "users": [s.key.user_id for s in checking],
            "sids": [s.key.session_id for s in checking],
            "row_apps": [key.app_name for key, _ in wanted],
            "row_users": [key.user_id for key, _ in wanted],
            "row_sids": [key.session_id for key, _ in wanted],
            "ids": [event_id for _, event_id in wanted],
        })
    else:
        ids = sorted({event_id for _, event_id in heal_ids | anchor_ids})
        table = events_table()
        columns = (table.c.app_name, table.c.user_id, table.c.session_id)

        def near(sessions: Sequence[SessionHeals]) -> tuple[Any, ...]:
            return (
                table.c.session_id.in_({s.key.session_id for s in sessions}),
                table.c.app_name.in_({s.key.app_name for s in sessions}),
                table.c.user_id.in_({s.key.user_id for s in sessions}),
            )

        # The row-reading part comes first: a UNION takes its result types
        # (here: the timestamp column's) from its first SELECT.
        by_id = select(*columns, literal(0).label("events"), table.c.id,
                       table.c.timestamp).where(*near(batch), table.c.id.in_(ids))
        statement: Any = by_id
        if checking:
            statement = union_all(by_id, select(
                *columns, func.count().label("events"), null().label("id"),
                null().label("timestamp"),
            ).where(*near(checking)).group_by(*columns))
        rows = await conn.execute(statement)
    counts: dict[SessionKey, int] = {}
    present: list[tuple[str, str, str, str]] = []
    anchor_columns: dict[tuple[SessionKey, str], datetime.datetime] = {}
    for app, user, session, events, event_id, column in rows:
        key = SessionKey(app, user, session)
        if event_id is None:
            counts[key] = int(events)
            continue
        if (key, event_id) in heal_ids:
            present.append((app, user, session, event_id))
        if (key, event_id) in anchor_ids and isinstance(column, datetime.datetime):
            anchor_columns[(key, event_id)] = column
    return Recheck(discount_planned(checking, counts, present), anchor_columns)

