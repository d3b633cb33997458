"""A SessionFilter as SQL (session_filter_sql.py): the clause and the ordered read per engine."""

from __future__ import annotations

import dataclasses

from adk_session_heal.core.shards import Shard
from adk_session_heal.store import SessionFilter
from adk_session_heal.store.session_filter_sql import events_in_order, where_clause


def test_a_filter_is_a_plain_value() -> None:
    """The filter holds its fields only: no SQL is built until a layout asks for it."""
    where = SessionFilter(app_name="app", shard=Shard(1, 2))
    assert [f.name for f in dataclasses.fields(where)] == [
        "app_name", "user_id", "session_id", "shard", "since"]
    assert dataclasses.replace(where, app_name=None) == SessionFilter(shard=Shard(1, 2))
    assert not hasattr(where, "where") and not hasattr(where, "events_in_order")


def test_the_clause_binds_each_field_given() -> None:
    """App, user and session become bound parameters, on the column the caller names."""
    assert where_clause(SessionFilter(), "id") == ("", {})
    clause, params = where_clause(SessionFilter("a", "u", "s"), "session_id", "sqlite")
    assert clause == (" WHERE app_name = :app_name AND user_id = :user_id"
                      " AND session_id = :session_id")
    assert params == {"app_name": "a", "user_id": "u", "session_id": "s"}


def test_a_sqlite_shard_reads_through_sessions() -> None:
    """On SQLite a shard without ``since`` joins ``sessions`` (one hash per session)."""
    query = events_in_order(SessionFilter(shard=Shard(1, 2)), ("id",), "id", "sqlite")
    assert "FROM sessions" in query.sql and "CROSS JOIN events" in query.sql
    assert not query.newest_first and query.keys is None
