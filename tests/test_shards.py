"""Shards (shards.py): n shards cover every session exactly once, alike on every store."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import close_redis
from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig
from servers import REDIS_URL, temporary_redis_prefix
from stores import APP, KINDS, USER, bulk_fill, bulk_histories, make_store
from test_cli import cli

from adk_session_heal.bulk import scan
from adk_session_heal.session_key import SessionKey
from adk_session_heal.shards import Shard, bucket
from adk_session_heal.store import SessionFilter, open_store

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
        parts = [await scan(store.url, now=NOW, where=SessionFilter(shard=Shard(n, 2)))
                 for n in (1, 2)]
        assert sum(p.sessions_scanned for p in parts) == whole.sessions_scanned
        assert sum(p.events_scanned for p in parts) == whole.events_scanned
        assert sorted(c.call_event_id for p in parts for c in p.dead_calls) == sorted(
            c.call_event_id for c in whole.dead_calls)
        assert whole.dead_calls


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
