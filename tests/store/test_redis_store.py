"""ADK's RedisSessionService on the real Redis: the wrapper, ADK's own reads and appends
after a heal, scan and repair over redis:// URLs, racing processes, TTLs and bytes kept.

Each test gets an ADK key prefix of its own (``servers.temporary_redis_prefix``),
whose keys and heal-ledger hash are deleted after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis_asyncio
from cli_runner import assert_one_line_error, cli
from conftest import close_redis
from deleting import DELETE_SESSIONS, repair_while_deleting
from google.adk.events.event import Event
from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig
from google.adk.sessions import Session
from google.genai import types
from paths import CHILDREN, ROOT, SUPPORT
from redis_store import fill, session_key, store_url
from servers import REDIS_URL, temporary_redis_prefix
from service_histories import crashed_history, store_crashed, synthetic
from stores import APP, USER, bulk_histories, crashed_histories

from adk_session_heal import migrate
from adk_session_heal.core.findings import classify
from adk_session_heal.core.heal_record import HealRecord, HealTrigger
from adk_session_heal.errors import UnsupportedStoreError
from adk_session_heal.ops.apply import apply_plan
from adk_session_heal.ops.scan import plan_repair
from adk_session_heal.runtime.service import HealingSessionService
from adk_session_heal.store import Layout, WriteOutcome, open_store, store_for_service
from adk_session_heal.store.ledger.heal_redis import RedisHealLedger
from adk_session_heal.store.urls import parse_store_url

ServiceMaker = Callable[..., RedisSessionService]


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A fresh ADK key prefix on the real Redis, deleted after the test."""
    async with temporary_redis_prefix() as fresh:
        yield fresh


@pytest.fixture
async def raw() -> AsyncIterator[Any]:
    """A plain redis-py client, to read keys as stored."""
    client = redis_asyncio.from_url(REDIS_URL, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
async def services(prefix: str) -> AsyncIterator[ServiceMaker]:
    """Makes ADK RedisSessionServices over the test's prefix (a new client each, as
    another process would have); closes their clients after."""
    made: list[RedisSessionService] = []

    def make(ttl_seconds: int = 604800) -> RedisSessionService:
        config = RedisSessionServiceConfig(uri=REDIS_URL, key_prefix=prefix,
                                           ttl_seconds=ttl_seconds)
        made.append(RedisSessionService(config))
        return made[-1]

    yield make
    for service in made:
        await close_redis(service)


async def stored(service: RedisSessionService, session_id: str) -> list[Event]:
    """The session's events as ADK's own get_session reads them."""
    session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    return session.events


async def test_wrapper_heals_once_and_adk_reads_the_heal_after_its_call(
    services: ServiceMaker,
) -> None:
    """The wrapper writes one heal; ADK's get_session reads it right after the call."""
    history = crashed_history()
    session = await store_crashed(services(), history)
    heals: list[HealRecord] = []
    for _ in range(3):
        inner = services()
        wrapper = HealingSessionService(inner, on_heal=heals.append,
                                        ledger=RedisHealLedger.from_service(inner))
        healed = await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert healed is not None
        assert [e.id for e in healed.events] == ["e-0001", "e-0002", "e-0002-heal", "e-0003"]
    assert len(heals) == 1 and heals[0].trigger is HealTrigger.GET_SESSION
    assert await RedisHealLedger.from_service(services()).history() == heals
    events = await stored(services(), session.id)
    assert [e.id for e in events] == ["e-0001", "e-0002", "e-0002-heal", "e-0003"]
    (heal,) = synthetic(events)
    assert (heal.author, heal.invocation_id) == (history.events[1].author,
                                                 history.events[1].invocation_id)
    assert [(r.id, r.name) for r in heal.get_function_responses()] == [("call-1", "get_weather")]
    assert not classify(events, now=time.time()).needs_healing


async def test_a_client_that_returns_bytes_heals_the_same(prefix: str) -> None:
    """A service given its own client without decode_responses is healed alike."""
    client = redis_asyncio.from_url(REDIS_URL)
    try:
        service = RedisSessionService(RedisSessionServiceConfig(key_prefix=prefix),
                                      redis_client=client)
        session = await store_crashed(service, crashed_history())
        healed = await HealingSessionService(service).get_session(
            app_name=APP, user_id=USER, session_id=session.id)
        assert healed is not None
        assert [e.id for e in await stored(service, session.id)] == [
            "e-0001", "e-0002", "e-0002-heal", "e-0003"]
    finally:
        await client.aclose()


async def test_adk_appends_after_a_heal_keep_it(services: ServiceMaker) -> None:
    """ADK's own append_event works after a heal, from a view loaded before it too."""
    session = await store_crashed(services(), crashed_history())
    before_heal = await services().get_session(app_name=APP, user_id=USER,
                                               session_id=session.id)
    healed = await HealingSessionService(services()).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    assert before_heal is not None and healed is not None

    def reply(text: str) -> Event:
        return Event(invocation_id="inv-3", author="assistant",
                     content=types.Content(role="model", parts=[types.Part(text=text)]))

    first, second = reply("from the view read before the heal"), reply("from the healed view")
    await services().append_event(before_heal, first)
    await services().append_event(healed, second)

    events = await stored(services(), session.id)
    assert [e.id for e in events] == [
        "e-0001", "e-0002", "e-0002-heal", "e-0003", first.id, second.id]
    assert len(synthetic(events)) == 1


async def test_ttl_last_update_time_and_every_other_byte_are_kept(
    services: ServiceMaker, prefix: str, raw: Any
) -> None:
    """The heal is the only change to the stored value; the key keeps its TTL (or none)."""
    for session_id, ttl_seconds in (("with-ttl", 3600), ("no-ttl", 0)):
        await store_crashed(services(ttl_seconds), crashed_history(), session_id)
        key = session_key(prefix, session_id)
        before, ttl_before = await raw.get(key), await raw.pttl(key)

        await HealingSessionService(services(ttl_seconds)).get_session(
            app_name=APP, user_id=USER, session_id=session_id)

        after, ttl_after = await raw.get(key), await raw.pttl(key)
        if ttl_seconds:
            assert 0 < ttl_after <= ttl_before <= 3600 * 1000
            assert ttl_before - ttl_after < 5000
        else:
            assert ttl_before == ttl_after == -1
        (heal,) = synthetic(Session.model_validate_json(after).events)
        heal_json = heal.model_dump_json()
        call_json = Session.model_validate_json(before).events[1].model_dump_json()
        assert after == before.replace(call_json, f"{call_json},{heal_json}", 1)
        assert json.loads(after)["last_update_time"] == json.loads(before)["last_update_time"]
        # ADK's own next write re-serialises the session: every byte stays as it is.
        assert Session.model_validate_json(after).model_dump_json() == after


async def keys_and_values(raw: Any, prefix: str) -> dict[str, Any]:
    """Every key under the prefix, with its value and TTL."""
    keys = sorted([key async for key in raw.scan_iter(match=f"{prefix}*")])
    return {key: (await raw.get(key), await raw.ttl(key) > 0) for key in keys}


async def test_cli_scan_and_repair_over_a_redis_url(
    services: ServiceMaker, prefix: str, raw: Any
) -> None:
    """scan finds the dead calls; repair heals each once with its ledger record; a
    second repair writes nothing; ADK reads every heal right after its call."""
    sessions = await fill(services())
    url = store_url(prefix)

    found = cli("scan", url, "--json")
    assert found.exit_code == 1, found.output
    report = json.loads(found.stdout)
    assert report["sessions_scanned"] == len(sessions)
    dead = {(c["session_id"], c["status"]) for c in report["dead_calls"]}
    assert dead == {("dead", "superseded"), ("stale", "stale"), ("parallel", "superseded")}

    before = await keys_and_values(raw, prefix)
    dry = cli("repair", url, "--dry-run", "--format", "table")
    assert dry.exit_code == 0 and "would insert event" in dry.stdout
    assert await keys_and_values(raw, prefix) == before

    healed = cli("repair", url, "--yes", "--json")
    assert healed.exit_code == 0, healed.output
    document = json.loads(healed.stdout)
    assert document["healed"] == 3
    assert cli("scan", url).exit_code == 0
    again = json.loads(cli("repair", url, "--yes", "--json").stdout)
    assert again["healed"] == 0 and again["heals"] == []

    records = await RedisHealLedger(raw, key_prefix=prefix).history()
    assert sorted((r.session_id, r.trigger) for r in records) == [
        ("dead", HealTrigger.REPAIR), ("parallel", HealTrigger.REPAIR),
        ("stale", HealTrigger.REPAIR)]
    for session_id in ("dead", "stale", "parallel"):
        events = await stored(services(), session_id)
        (heal,) = synthetic(events)
        index = [e.id for e in events].index(heal.id)
        assert events[index - 1].id + "-heal" == heal.id
        assert not classify(events, now=time.time(), stale_after=3600).needs_healing
    after = await keys_and_values(raw, prefix)
    assert set(after) == set(before)
    changed = {key for key in before if after[key] != before[key]}
    assert changed == {session_key(prefix, s) for s in ("dead", "stale", "parallel")}
    assert all(has_ttl for _, has_ttl in after.values())
    state = await services().get_session(app_name=APP, user_id=USER, session_id="stateful")
    assert state is not None and state.state == {"app:theme": "dark", "user:lang": "fr", "k": 1}


async def test_scan_filters_and_keys_that_only_look_like_a_session(
    services: ServiceMaker, prefix: str
) -> None:
    """Filters select by the stored session, not the key pattern alone: an app whose name
    holds a ':' matches the pattern of another, and state keys match it too."""
    await fill(services())
    other = await services().create_session(app_name=f"{APP}:{USER}", user_id="x",
                                            session_id="dead", state={"user:z": 1})
    for event in crashed_histories()["dead"].events:
        await services().append_event(other, event)
    url = store_url(prefix)

    def scanned(*options: str) -> tuple[int, set[tuple[str, str]]]:
        result = cli("scan", url, "--json", *options)
        assert result.exit_code in (0, 1), result.output
        report = json.loads(result.stdout)
        return report["sessions_scanned"], {
            (c["app_name"], c["session_id"]) for c in report["dead_calls"]}

    everything = scanned()
    assert everything[0] == len(crashed_histories()) + 2
    assert (f"{APP}:{USER}", "dead") in everything[1]
    assert scanned("--app", APP) == (len(crashed_histories()) + 1, everything[1] - {
        (f"{APP}:{USER}", "dead")})
    assert scanned("--app", APP, "--user", USER, "--session", "dead") == (1, {(APP, "dead")})
    assert scanned("--session", "dead") == (2, {(APP, "dead"), (f"{APP}:{USER}", "dead")})
    assert scanned("--user", "nobody") == (0, set())


async def test_ledger_commands_and_bad_redis_urls_fail_in_one_line(prefix: str) -> None:
    """db upgrade points to the Redis ledger, history reads it; no password is ever printed."""
    url = store_url(prefix)
    assert f"revision {migrate.head_revision()}" in cli("db", "current", url).stdout
    assert_one_line_error(cli("db", "upgrade", url), "needs no `db upgrade`")
    history = cli("history", url, "--json")
    assert history.exit_code == 0 and json.loads(history.stdout)["heals"] == []
    assert_one_line_error(cli("scan", "redis://:hunter2@127.0.0.1:1/0"), "cannot connect")
    assert_one_line_error(cli("scan", "redis://nobody:hunter2@127.0.0.1:6379/0"),
                          "username-password")
    assert_one_line_error(cli("scan", "redis://127.0.0.1:6379/0?bogus=1"), "options")
    assert_one_line_error(cli("scan", "redis+asyncio://127.0.0.1:6379/0"), "redis://")
    assert_one_line_error(cli("scan", "redis://:hunter2@127.0.0.1:6379/sessions"),
                          "database number")


def test_redis_urls_parse_and_hide_their_password() -> None:
    """redis:// and rediss:// are accepted; the password shows only in what redis-py gets."""
    url = parse_store_url("rediss://user:hunter2@cache:6380/2?key_prefix=my:prefix:")
    assert url.backend == "redis" and url.redis_key_prefix == "my:prefix:"
    assert "hunter2" not in str(url) and "hunter2" not in repr(url)
    assert url.redis_url() == "rediss://user:hunter2@cache:6380/2"
    assert parse_store_url("redis://localhost").redis_key_prefix == "adk:session:"


async def test_a_session_that_moved_since_the_plan_is_skipped(
    services: ServiceMaker, prefix: str
) -> None:
    """apply_plan re-reads each session: one appended to is changed, one deleted is gone."""
    service = services()
    await fill(service)
    plan = await plan_repair(store_url(prefix))
    dead = await service.get_session(app_name=APP, user_id=USER, session_id="dead")
    assert dead is not None
    await service.append_event(dead, Event(invocation_id="inv-9", author="user", content=(
        types.Content(role="user", parts=[types.Part(text="still there?")]))))
    await service.delete_session(app_name=APP, user_id=USER, session_id="stale")

    report = await apply_plan(plan)
    outcomes = {h.record.session_id: h.outcome for h in report.heals}
    assert outcomes == {"dead": WriteOutcome.CHANGED, "stale": WriteOutcome.GONE,
                        "parallel": WriteOutcome.WRITTEN}
    client = redis_asyncio.from_url(REDIS_URL, decode_responses=True)
    try:
        records = await RedisHealLedger(client, key_prefix=prefix).history()
    finally:
        await client.aclose()
    assert [r.session_id for r in records] == ["parallel"]


@pytest.mark.slow
async def test_eight_processes_reading_a_crashed_session_store_one_heal(
    services: ServiceMaker, prefix: str
) -> None:
    """Eight OS processes heal the same session at once through the wrapper: one heal."""
    session = await store_crashed(services(), crashed_history())
    go = ROOT / f".go-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "PYTHONPATH": str(SUPPORT)}
    readers = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(CHILDREN / "redis_heal_reader.py"), REDIS_URL, prefix,
            session.id, str(go), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env)
        for _ in range(8)
    ]
    try:
        for reader in readers:
            assert reader.stdout is not None
            line = await asyncio.wait_for(reader.stdout.readline(), 120)
            assert line.strip() == b"ready", (await reader.communicate())[1][-2000:]
        go.touch()
        outputs = [await asyncio.wait_for(r.communicate(), 120) for r in readers]
    finally:
        go.unlink(missing_ok=True)
    assert all(r.returncode == 0 for r in readers), [err[-2000:] for _, err in outputs]
    written, seen = zip(*(map(int, out.split()) for out, _ in outputs), strict=True)
    assert sum(written) == 1
    assert set(seen) == {1}
    events = await stored(services(), session.id)
    assert [e.id for e in events] == ["e-0001", "e-0002", "e-0002-heal", "e-0003"]


@pytest.mark.slow
async def test_a_kill_inside_the_transaction_leaves_neither_heal_nor_record(
    services: ServiceMaker, prefix: str, raw: Any
) -> None:
    """Heal and ledger record are one MULTI/EXEC: a kill before EXEC leaves neither."""
    service = services()
    session = await service.create_session(app_name=APP, user_id=USER, session_id="dead")
    for event in crashed_histories()["dead"].events:
        await service.append_event(session, event)
    key = session_key(prefix, "dead")
    before = await raw.get(key)
    command = [sys.executable, str(CHILDREN / "redis_kill_between.py"), store_url(prefix)]
    killed = await asyncio.create_subprocess_exec(*command, "--kill",
                                                  stderr=asyncio.subprocess.PIPE)
    queued: set[str] = set()  # what the server holds in the dying client's MULTI
    deadline = time.monotonic() + 120
    while killed.returncode is None and time.monotonic() < deadline:
        queued.update(c["multi"] for c in await raw.client_list() if c.get("multi", "-1") != "-1")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(killed.wait(), 0.01)
    _, stderr = await killed.communicate()
    assert killed.returncode == 9, stderr.decode()[-2000:]
    assert "2" in queued  # the session's SET and the ledger's HSETNX reached the server
    assert await raw.get(key) == before
    assert await raw.hlen(f"adk_session_heal:ledger:{prefix}") == 0
    finished = subprocess.run(command, capture_output=True, timeout=120)
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    assert len(synthetic(await stored(service, "dead"))) == 1
    assert await raw.hlen(f"adk_session_heal:ledger:{prefix}") == 1


class _ListsOwnWay(RedisSessionService):
    """Overrides a method that touches no event: still not known to keep ADK's layout."""

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return {}


class _Configured(RedisSessionService):
    """Only configures ADK's service."""

    def __init__(self) -> None:
        super().__init__()


class _AppendsOwnWay(RedisSessionService):
    """Overrides append_event: its layout is not known to be ADK's."""

    async def append_event(self, session: Session, event: Event) -> Event:
        return await super().append_event(session, event)


def test_redis_adapter_only_for_adk_layout() -> None:
    """ADK's class (or a subclass overriding nothing but __init__) gets the Redis adapter."""
    session = Session(id="s", app_name=APP, user_id=USER)

    def layout(service: RedisSessionService) -> Layout:
        return store_for_service(service, session).layout

    assert layout(RedisSessionService()) is Layout.REDIS
    assert layout(_Configured()) is Layout.REDIS
    assert layout(_ListsOwnWay()) is Layout.APPEND
    assert layout(_AppendsOwnWay()) is Layout.APPEND


def test_importing_the_package_loads_no_redis_module() -> None:
    """redis and ADK's Redis integration are imported only when a Redis store is used."""
    code = ("import sys, adk_session_heal, adk_session_heal.cli, adk_session_heal.store; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'redis' "
            "or m.startswith('google.adk.integrations.redis')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == "[]"


async def test_without_the_redis_package_the_error_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Redis URL without redis-py installed says how to install it."""
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)
    with pytest.raises(UnsupportedStoreError, match=r"adk-session-heal\[redis\]") as raised:
        await open_store("redis://127.0.0.1:6379/0")
    assert "\n" not in str(raised.value)


async def test_cli_repair_takes_back_a_heal_a_late_result_superseded(
    services: ServiceMaker, prefix: str, raw: Any
) -> None:
    """A real response stored after the heal: repair cuts the heal out, records it, once."""
    service = services()
    session = await store_crashed(service, crashed_history(), "late")
    url = store_url(prefix)
    assert cli("repair", url, "--yes").exit_code == 0
    session = await service.get_session(app_name=APP, user_id=USER, session_id="late")
    assert session is not None and len(synthetic(session.events)) == 1
    (call,) = [c for e in session.events for c in e.get_function_calls()]
    await service.append_event(session, Event(
        invocation_id=session.events[1].invocation_id, author="assistant",
        content=types.Content(role="user", parts=[types.Part(function_response=types.
            FunctionResponse(id=call.id, name=call.name, response={"temp_c": 21}))])))
    done = json.loads(cli("repair", url, "--yes", "--json").stdout)
    assert done["taken_back"] == 1 and done["healed"] == 0
    events = await stored(services(), "late")
    assert synthetic(events) == [] and not classify(events, now=time.time()).duplicate_responses
    (removal,) = await RedisHealLedger(raw, key_prefix=prefix).removals()
    assert (removal.key.session_id, removal.removed_by) == ("late", "repair")
    value = await raw.get(session_key(prefix, "late"))
    again = json.loads(cli("repair", url, "--yes", "--json").stdout)
    assert again["taken_back"] == 0 and await raw.get(session_key(prefix, "late")) == value


@pytest.mark.slow
async def test_sessions_deleted_during_a_repair_are_skipped_and_reported(
    services: ServiceMaker, prefix: str, raw: Any, tmp_path: Path
) -> None:
    """As on the SQL engines (tests/ops/test_repair.py): 300 of 3,000 sessions deleted through
    ADK's delete_session during `repair` are reported as deleted or were healed first; the
    others are healed and recorded; exit code 3."""
    service = services()
    template = await service.create_session(app_name=APP, user_id=USER, session_id="template")
    for event in bulk_histories(1, 8, 1.0)[0].events:
        await service.append_event(template, event)
    key = session_key(prefix, "template")
    value, ttl = await raw.get(key), await raw.ttl(key)
    assert value.count('"id":"template"') == 1
    async with raw.pipeline(transaction=False) as pipe:  # 3,000 copies of ADK's own value
        for n in range(DELETE_SESSIONS):
            pipe.set(session_key(prefix, f"s{n:07d}"),
                     value.replace('"id":"template"', f'"id":"s{n:07d}"'), ex=ttl)
        pipe.delete(key)
        await pipe.execute()

    _, gone = await repair_while_deleting(store_url(prefix), service, tmp_path / "repair.log")

    records = await RedisHealLedger(raw, key_prefix=prefix).history()
    assert {r.session_id for r in records} == {
        f"s{n:07d}" for n in range(DELETE_SESSIONS)} - gone
