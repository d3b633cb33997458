"""A session's rows exactly as each of ADK's services stores them, read and edited behind its back.

For the removal-rule and resolve tests over every layout (``conftest.STORES``):
:func:`stored_events` reads a session's events in the form the layout keeps
(the ``event_data`` JSON of the SQL layouts, the JSON inside a Redis value,
the ``model_dump`` of an in-memory ``Event``), in ADK's read order, and
:func:`edit_event` changes one of them in place, as a support engineer or
another tool would, without going through ADK.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions import BaseSessionService, DatabaseSessionService, InMemorySessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from sqlalchemy import select, update
from stores import ADK_EVENTS_TABLE

from adk_session_heal.core.session_key import SessionKey

Change = Callable[[dict[str, Any]], dict[str, Any]]
"""Returns the new JSON of an event, given its stored JSON."""


def _redis_key(service: Any, key: SessionKey) -> str:
    return f"{service.config.key_prefix}{key.app_name}:{key.user_id}:{key.session_id}"


async def stored_events(service: BaseSessionService, key: SessionKey) -> list[dict[str, Any]]:
    """Returns a session's events as its layout stores them, in ADK's read order."""
    if isinstance(service, InMemorySessionService):
        session = service.sessions[key.app_name][key.user_id][key.session_id]
        return [event.model_dump(mode="json") for event in session.events]
    if isinstance(service, SqliteSessionService):
        with closing(sqlite3.connect(service._db_path)) as db:
            rows = db.execute(
                "SELECT event_data FROM events WHERE app_name=? AND user_id=? AND "
                "session_id=? ORDER BY timestamp, rowid",
                (key.app_name, key.user_id, key.session_id)).fetchall()
        return [json.loads(text) for (text,) in rows]
    if isinstance(service, DatabaseSessionService):
        events = ADK_EVENTS_TABLE
        async with service.db_engine.connect() as conn:
            rows = (await conn.execute(select(events.c.id, events.c.event_data).where(
                events.c.app_name == key.app_name, events.c.user_id == key.user_id,
                events.c.session_id == key.session_id,
            ).order_by(events.c.timestamp, events.c.id))).all()
        return [{**row.event_data, "id": row.id} for row in rows]
    raw = await service._get_redis().get(_redis_key(service, key))  # type: ignore[attr-defined]
    return list(json.loads(raw)["events"])


async def edit_event(service: BaseSessionService, key: SessionKey, event_id: str,
                     change: Change) -> None:
    """Rewrites one stored event's JSON behind ADK's back (every other row untouched)."""
    if isinstance(service, InMemorySessionService):
        session = service.sessions[key.app_name][key.user_id][key.session_id]
        index = next(i for i, e in enumerate(session.events) if e.id == event_id)
        session.events[index] = Event.model_validate(
            change(session.events[index].model_dump(mode="json", exclude_none=True)))
        return
    if isinstance(service, SqliteSessionService):
        where = (key.app_name, key.user_id, key.session_id, event_id)
        with closing(sqlite3.connect(service._db_path)) as db, db:
            (text,) = db.execute("SELECT event_data FROM events WHERE app_name=? AND "
                                 "user_id=? AND session_id=? AND id=?", where).fetchone()
            db.execute("UPDATE events SET event_data=? WHERE app_name=? AND user_id=? AND "
                       "session_id=? AND id=?", (json.dumps(change(json.loads(text))), *where))
        return
    if isinstance(service, DatabaseSessionService):
        events = ADK_EVENTS_TABLE
        clause = (events.c.app_name == key.app_name, events.c.user_id == key.user_id,
                  events.c.session_id == key.session_id, events.c.id == event_id)
        async with service.db_engine.begin() as conn:
            data = (await conn.execute(select(events.c.event_data).where(*clause))).scalar_one()
            await conn.execute(update(events).where(*clause).values(event_data=change(data)))
        return
    client = service._get_redis()  # type: ignore[attr-defined]
    name = _redis_key(service, key)
    value = json.loads(await client.get(name))
    value["events"] = [change(e) if e.get("id") == event_id else e for e in value["events"]]
    await client.set(name, json.dumps(value), keepttl=True)
