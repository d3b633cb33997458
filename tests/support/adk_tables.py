"""The rows of ADK's own tables, read and edited with plain SQL behind ADK's back.

For the undo and late-result tests, which compare a store byte for byte and edit a heal
as another writer might.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import create_async_engine
from stores import ADK_EVENTS_TABLE, Store


async def event_rows(store: Store) -> Any:
    """Every row of ADK's own tables (``sessions``, ``events``, state), as stored."""
    tables = ("sessions", "events", "app_states", "user_states")
    if store.kind == "adk_sqlite":
        assert store.sqlite_path is not None
        with closing(sqlite3.connect(store.sqlite_path)) as db:
            return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall()) for t in tables}
    engine = create_async_engine(store.url)
    try:
        async with engine.connect() as conn:
            return {t: sorted(repr(tuple(row)) for row in await conn.execute(
                text(f"SELECT * FROM {t}"))) for t in tables}
    finally:
        await engine.dispose()


async def change_one_heal(store: Store, session_id: str, event_id: str) -> None:
    """Edits one stored heal's JSON (its error message), as another writer might."""
    if store.kind == "adk_sqlite":
        assert store.sqlite_path is not None
        with closing(sqlite3.connect(store.sqlite_path)) as db, db:
            where = (session_id, event_id)
            (data,) = db.execute("SELECT event_data FROM events WHERE session_id = ? AND id = ?",
                                 where).fetchone()
            changed = json.loads(data)
            changed["error_message"] = "edited by hand"
            db.execute("UPDATE events SET event_data = ? WHERE session_id = ? AND id = ?",
                       (json.dumps(changed), *where))
        return
    engine = create_async_engine(store.url)
    events = ADK_EVENTS_TABLE
    try:
        async with engine.begin() as conn:
            where = (events.c.session_id == session_id, events.c.id == event_id)
            data = (await conn.execute(select(events.c.event_data).where(*where))).scalar_one()
            await conn.execute(update(events).where(*where).values(
                event_data={**data, "error_message": "edited by hand"}))
    finally:
        await engine.dispose()
