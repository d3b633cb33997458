"""Shards (shards.py): n shards cover every session exactly once, alike on every store."""

from __future__ import annotations

import json
import random
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from cli_runner import cli
from conftest import close_redis
from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig
from servers import REDIS_URL, temporary_redis_prefix
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from stores import APP, KINDS, USER, bulk_fill, bulk_histories, make_store

from adk_session_heal import ScanOptions
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.core.shards import SQLITE_FUNCTION, Shard, bucket
from adk_session_heal.ops.scan import scan
from adk_session_heal.store import SessionFilter, open_store
from adk_session_heal.store.layouts.sql_tables import SqlTablesStore
from adk_session_heal.store.session_filter_sql import KEYS_PER_READ, events_in_order
from adk_session_heal.testing import History

NOW = 1_800_000_000.0
MD5_APP_USER_S1 = 0xeea41c4f
"""int(md5(b"app\\x1fuser\\x1fs1").hexdigest()[:8], 16), worked out once by hand."""


def test_bucket_is_md5_of_the_key() -> None:
    """The hash is the first 32 bits of MD5(app \\x1f user \\x1f session), as SQL computes it."""
    assert bucket("app", "user", "s1") == MD5_APP_USER_S1
    assert bucket("app", "user", "s1") != bucket("app", "user", "s2")
    assert bucket("ä", "ü", "ß") < 2**32


def test_shards_partition_any_keys() -> None:
    """Every key is held by exactly one of n shards, for several n."""
    rng = random.Random(3)
    keys = [SessionKey(rng.choice(["a", "b", "é"]), str(rng.random()), str(i))
            for i in range(500)]
    for count in (1, 2, 3, 7):
        shards = [Shard(i, count) for i in range(1, count + 1)]
        for key in keys:
            assert sum(shard.holds(key) for shard in shards) == 1
    halves = sum(Shard(1, 2).holds(key) for key in keys)
    assert 150 < halves < 350


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2", "1/2/3"])
def test_bad_shards_refused(text: str) -> None:
    """A shard that is not i/n with 1 <= i <= n is refused with how to write it."""
    with pytest.raises(ValueError, match="1/2"):
        Shard.parse(text)


@pytest.mark.parametrize("kind", KINDS)
async def test_sql_shards_match_python(kind: str, tmp_path: Path) -> None:
    """Each engine's shard holds exactly the sessions Shard.holds names; scans add up."""
    async for store in make_store(kind, tmp_path):
        await bulk_fill(store, bulk_histories(40, 8, 0.3), app=APP, user="ü-user")
        opened = await open_store(store.url)
        try:
            every = [s.key async for s in opened.stream_sessions(SessionFilter())]
            assert len(every) == 40
            seen: list[SessionKey] = []
            counted = 0
            for number in (1, 2, 3):
                shard = Shard(number, 3)
                where = SessionFilter(shard=shard)
                keys = [s.key async for s in opened.stream_sessions(where)]
                assert keys == [k for k in every if shard.holds(k)]
                counted += await opened.count_sessions(where)
                found = await opened.candidates(where, everywhere=True)
                assert found is not None
                async for candidate in found[1]:
                    assert shard.holds(candidate.key)
                seen.extend(keys)
            assert sorted(seen) == sorted(every)
            assert counted == await opened.count_sessions(SessionFilter()) == 41  # + seed
        finally:
            await opened.close()
        whole = await scan(store.url, now=NOW)
        parts = [await scan(store.url, ScanOptions(where=SessionFilter(shard=Shard(n, 2))), now=NOW)
                 for n in (1, 2)]
        assert sum(p.sessions_scanned for p in parts) == whole.sessions_scanned
        assert sum(p.events_scanned for p in parts) == whole.events_scanned
        assert sorted(c.call_event_id for p in parts for c in p.dead_calls) == sorted(
            c.call_event_id for c in whole.dead_calls)
        assert whole.dead_calls


def tied_histories(count: int) -> list[History]:
    """Histories whose events share one timestamp and are stored newest first (ties decide)."""
    histories = bulk_histories(count, 8, 0.3)
    for index in range(0, count, 3):
        tied = History(start=1_700_000_000.0 + index, step=0.0)
        tied.user("q")
        tied.respond((tied.call("lookup", {"q": 1}), "lookup", {"a": 1}))
        tied.call("lookup", {"q": 2})
        tied.text("a")
        tied.events.reverse()  # rowid order (ADK's SQLite file) against id order
        histories[index] = tied
    return histories


@pytest.mark.parametrize("kind", KINDS)
async def test_shards_read_events_in_adk_order(kind: str, tmp_path: Path) -> None:
    """Each shard yields each session's events in ADK's order (ties too), as the whole read does
    (SQLite's shards read through ``sessions``, MariaDB's reads walk ADK's index newest first)."""
    async for store in make_store(kind, tmp_path):
        await bulk_fill(store, tied_histories(30), user="u")
        await bulk_fill(store, bulk_histories(10, 8, 0.3), app="other", user="v")
        opened = await open_store(store.url)
        try:
            whole = {s.key: [e["id"] for e in s.events]
                     async for s in opened.stream_sessions(SessionFilter())}
            one = SessionKey(APP, "u", "s0000003")
            own = next(Shard(n, 2) for n in (1, 2) if Shard(n, 2).holds(one))
            for where in (SessionFilter(shard=Shard(1, 2)), SessionFilter(shard=Shard(2, 2)),
                          SessionFilter(app_name="other", shard=Shard(2, 3)),
                          SessionFilter(app_name=APP, user_id="u", session_id="s0000003",
                                        shard=own)):
                part = {s.key: [e["id"] for e in s.events]
                        async for s in opened.stream_sessions(where)}
                assert part == {k: v for k, v in whole.items() if where.holds(k)}
                assert part
            assert whole[SessionKey(APP, "u", "s0000000")] == (
                ["e-0005", "e-0004", "e-0003", "e-0002", "e-0001"] if kind == "adk_sqlite"
                else ["e-0001", "e-0002", "e-0003", "e-0004", "e-0005"])
        finally:
            await opened.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_shards_read_every_page_of_keys(kind: str, tmp_path: Path) -> None:
    """Shards over more sessions than one page of keys (MariaDB reads them by key, page by page),
    with apps and users changing inside pages, read exactly the whole read's sessions."""
    async for store in make_store(kind, tmp_path):
        for app in ("app", "bpp"):
            for user in ("u", "v"):
                await bulk_fill(store, bulk_histories(KEYS_PER_READ // 2 + 21, 4, 0.3), app=app,
                                user=user)
        opened = await open_store(store.url)
        try:
            whole = [(s.key, [e["id"] for e in s.events])
                     async for s in opened.stream_sessions(SessionFilter())]
            assert len(whole) > 2 * KEYS_PER_READ
            for where in (SessionFilter(shard=Shard(1, 1)), SessionFilter(shard=Shard(1, 2)),
                          SessionFilter(shard=Shard(2, 2)), SessionFilter(shard=Shard(3, 3)),
                          SessionFilter(app_name="bpp", shard=Shard(1, 2)),
                          SessionFilter(user_id="v", shard=Shard(2, 2))):
                part = [(s.key, [e["id"] for e in s.events])
                        async for s in opened.stream_sessions(where)]
                assert sorted(part) == sorted(p for p in whole if where.holds(p[0]))
                assert len({key for key, _ in part}) == len(part) > 20
        finally:
            await opened.close()


async def test_mariadb_reads_along_adks_index_without_sorting(tmp_path: Path) -> None:
    """MariaDB reads each session newest first along ADK's index (no filesort) and reverses it;
    without the index it sorts, and both give the same sessions in the same order."""
    async for store in make_store("mariadb", tmp_path):
        await bulk_fill(store, tied_histories(12), user="u")
        opened = await open_store(store.url)
        try:
            assert isinstance(opened, SqlTablesStore)
            index = await opened._newest_first_index()
            assert index == "idx_events_app_user_session_ts_id"
            query = events_in_order(SessionFilter(), ("id",), "id", "mysql",
                                    newest_first_index=index)
            assert query.newest_first
            sql = query.sql
            engine = create_async_engine(store.url)
            try:
                async with engine.connect() as conn:
                    plan = [str(r) for r in (await conn.execute(text(f"EXPLAIN {sql}"))).all()]
            finally:
                await engine.dispose()
            assert not any("filesort" in row or "temporary" in row for row in plan), plan
            by_key = events_in_order(SessionFilter(shard=Shard(1, 2)), ("id",), "id", "mysql",
                                     newest_first_index=index)
            assert by_key.newest_first and by_key.keys is not None
            keys_sql, keys_params = by_key.keys_after(("app", "u", "s0000003"))
            page_sql, page_params = by_key.page(
                [(APP, "u", f"s{n:07d}") for n in range(KEYS_PER_READ)])
            engine = create_async_engine(store.url)
            try:
                async with engine.connect() as conn:
                    for sql, params in ((keys_sql, keys_params), (page_sql, page_params)):
                        plan = [str(r) for r in
                                (await conn.execute(text(f"EXPLAIN {sql}"), params)).all()]
                        assert len(plan) == 1 and "range" in plan[0], plan
                        assert "filesort" not in plan[0] and "temporary" not in plan[0], plan
            finally:
                await engine.dispose()
            along = [(s.key, [e["id"] for e in s.events])
                     async for s in opened.stream_sessions(SessionFilter())]
        finally:
            await opened.close()
        engine = create_async_engine(store.url)
        try:
            async with engine.begin() as conn:
                await conn.execute(text("ALTER TABLE events ADD INDEX heal_fk_keep "
                                        "(app_name, user_id, session_id)"))
                await conn.execute(text("DROP INDEX idx_events_app_user_session_ts_id ON events"))
        finally:
            await engine.dispose()
        opened = await open_store(store.url)
        try:
            assert isinstance(opened, SqlTablesStore)
            assert await opened._newest_first_index() is None
            sorted_read = [(s.key, [e["id"] for e in s.events])
                           async for s in opened.stream_sessions(SessionFilter())]
        finally:
            await opened.close()
        assert along == sorted_read and len(along) == 12  # ADK's seed session has no events
        assert along[0][1] == ["e-0001", "e-0002", "e-0003", "e-0004", "e-0005"]


async def test_sqlite_shard_hashes_each_session_once(tmp_path: Path) -> None:
    """SQLite runs the shard function once per session and walks ADK's index without sorting."""
    async for store in make_store("db_sqlite", tmp_path):
        await bulk_fill(store, bulk_histories(20, 10, 0.3))
        assert store.sqlite_path is not None
        with closing(sqlite3.connect(store.sqlite_path)) as db:
            calls = 0

            def counted(app: str, user: str, session: str) -> int:
                nonlocal calls
                calls += 1
                return bucket(app, user, session)

            db.create_function(SQLITE_FUNCTION, 3, counted)
            sql, params, newest_first, keys = events_in_order(
                SessionFilter(shard=Shard(1, 2)), ("session_id", "id"), "id", "sqlite")
            assert not newest_first and keys is None
            plan = " | ".join(r[-1] for r in db.execute(f"EXPLAIN QUERY PLAN {sql}", params))
            assert "TEMP B-TREE" not in plan, plan
            rows = db.execute(sql, params).fetchall()
            assert calls == 21  # 20 sessions and ADK's seed session, once each
            expected = db.execute(
                "SELECT session_id, id FROM events ORDER BY session_id, timestamp, id").fetchall()
            assert rows == [r for r in expected if Shard(1, 2).holds(SessionKey(APP, USER, r[0]))]
            assert 50 < len(rows) < 150


@pytest.mark.parametrize("kind", ["adk_sqlite", "db_sqlite", "postgres", "mariadb"])
async def test_shards_read_only_sessions_with_their_row(kind: str, tmp_path: Path) -> None:
    """Events left without a ``sessions`` row (ADK's foreign key forbids them) are read only
    by a scan without a shard; every session with its row is in exactly one shard."""
    async for store in make_store(kind, tmp_path):
        await bulk_fill(store, bulk_histories(12, 8, 0.5))
        if store.sqlite_path is not None:  # sqlite3 leaves foreign keys off
            with closing(sqlite3.connect(store.sqlite_path)) as db, db:
                db.execute("DELETE FROM sessions WHERE id = 's0000004'")
        else:
            engine = create_async_engine(store.url)
            try:
                async with engine.begin() as conn:  # skip the foreign key (and its cascade)
                    await conn.execute(text(
                        "SET LOCAL session_replication_role = replica" if kind == "postgres"
                        else "SET foreign_key_checks = 0"))
                    await conn.execute(text("DELETE FROM sessions WHERE id = 's0000004'"))
            finally:
                await engine.dispose()
        opened = await open_store(store.url)
        try:
            every = [s.key.session_id async for s in opened.stream_sessions(SessionFilter())]
            assert "s0000004" in every and len(every) == 12
            halves = [[s.key.session_id async for s in opened.stream_sessions(
                SessionFilter(shard=Shard(n, 2)))] for n in (1, 2)]
            assert sorted(halves[0] + halves[1]) == sorted(set(every) - {"s0000004"})
        finally:
            await opened.close()


async def test_redis_shards_partition_sessions() -> None:
    """On Redis the shard is applied in Python: the two halves cover every session once."""
    async with temporary_redis_prefix() as prefix:
        service = RedisSessionService(RedisSessionServiceConfig(uri=REDIS_URL, key_prefix=prefix))
        try:
            for index in range(20):
                await service.create_session(app_name=APP, user_id=USER,
                                             session_id=f"s{index:02d}")
        finally:
            await close_redis(service)
        url = f"{REDIS_URL}?key_prefix={prefix}"
        opened = await open_store(url)
        try:
            halves = [await opened.count_sessions(SessionFilter(shard=Shard(n, 2)))
                      for n in (1, 2)]
            held = [SessionKey(APP, USER, f"s{i:02d}") for i in range(20)]
            assert halves == [sum(Shard(1, 2).holds(k) for k in held),
                              sum(Shard(2, 2).holds(k) for k in held)]
            assert sum(halves) == 20
        finally:
            await opened.close()


async def test_cli_shards_add_up(tmp_path: Path) -> None:
    """`scan --shard i/n` on the command line: the shards' counts add up to the whole scan's."""
    async for store in make_store("db_sqlite", tmp_path):
        await bulk_fill(store, bulk_histories(30, 8, 0.3))
        whole = json.loads(cli("scan", store.url, "--json").stdout)
        parts = [json.loads(cli("scan", store.url, "--shard", f"{n}/3", "--json").stdout)
                 for n in (1, 2, 3)]
        for key in ("sessions_scanned", "events_scanned"):
            assert sum(p[key] for p in parts) == whole[key]
        assert sum(p["counts"]["dead_calls"] for p in parts) == whole["counts"]["dead_calls"]
        full = json.loads(cli("scan", store.url, "--full-scan", "--json").stdout)
        assert full["counts"] == whole["counts"]
        assert [(d["session_id"], d["call_event_id"]) for d in full["dead_calls"]] == [
            (d["session_id"], d["call_event_id"]) for d in whole["dead_calls"]]
        refused = cli("scan", store.url, "--shard", "3/2")
        assert refused.exit_code == 2 and "1 <= i <= n" in refused.stderr
