"""Late results: a real response stored after a heal takes the heal back out, on every store."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from adk_tables import change_one_heal, event_rows
from append_services import AppendingInMemoryService
from cli_runner import assert_one_line_error, cli
from conftest import ServiceFactory
from google.adk.events.event import Event
from google.adk.sessions import BaseSessionService, DatabaseSessionService, Session
from google.genai import types
from stores import (
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    close,
    fill,
    make_store,
    snapshot,
)

from adk_session_heal.core.event_access import STORED_JSON
from adk_session_heal.core.findings import classify
from adk_session_heal.core.late_results import late_results
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.migrate import upgrade
from adk_session_heal.policy import HealPolicy
from adk_session_heal.runtime.service import HealingSessionService
from adk_session_heal.testing import History, outline

APP, USER = "app", "user"


def late_response(call_id: str, *, invocation_id: str = "inv-1", event_id: str = "late-1",
                  timestamp: float | None = None) -> Event:
    """The tool's real response, stored after the call was healed."""
    part = types.Part(function_response=types.FunctionResponse(
        id=call_id, name="get_weather", response={"temp_c": 21}))
    return Event(id=event_id, invocation_id=invocation_id, author="assistant",
                 timestamp=time.time() if timestamp is None else timestamp,
                 content=types.Content(role="user", parts=[part]))


def crashed(now: float) -> tuple[History, str]:
    """user asks -> get_weather called -> (process dies) -> user returns -> model replies."""
    history = History(start=now - 60)
    history.user("weather in Paris?")
    call_id = history.call("get_weather", {"city": "Paris"})
    history.user("hello?")
    history.text("Sorry, the weather tool failed.")
    return history, call_id


async def stored(inner: BaseSessionService, history: History) -> Session:
    """Creates a session and appends ``history`` through the inner service itself."""
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in history.events:
        await inner.append_event(session, event)
    return session


async def reread(factory: ServiceFactory, session_id: str) -> Session:
    """Reads the session through a fresh, bare inner service (a second process)."""
    bare = await factory()
    session = await bare.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    return session


def heals_in(events: list[Event]) -> list[Event]:
    """The synthetic events of ours among ``events``."""
    return [e for e in events if (e.custom_metadata or {}).get("adk_session_heal")]


def test_late_results_finds_a_heal_answered_later_in_a_separate_event() -> None:
    """A real response after the heal, in its own event, supersedes it."""
    history, call_id = crashed(1_700_000_000.0)
    events = list(history.events)
    heal = Event(id="e-0002-heal", invocation_id="inv-1", author="assistant",
                 custom_metadata={"adk_session_heal": {
                     "synthetic": True, "call_event_id": "e-0002", "call_ids": [call_id],
                     "tool_names": ["get_weather"]}},
                 content=types.Content(role="user", parts=[types.Part(
                     function_response=types.FunctionResponse(
                         id=call_id, name="get_weather", response={"error": "x"}))]))
    events.insert(2, heal)
    assert late_results(events) == ()
    found = late_results([*events, late_response(call_id)])
    assert [(f.heal_event_id, f.call_ids, f.tool_names, f.response_event_ids) for f in found] == [
        ("e-0002-heal", (call_id,), ("get_weather",), ("late-1",))]
    # Sorted before the heal (a backwards clock) it still supersedes it.
    assert late_results([*events[:2], late_response(call_id), *events[2:]])[0].heal_index == 3
    # The same id reused by a later call: that later call owns the response, the heal stays.
    again = History(start=1_700_000_100.0)
    again.user("again?")
    again.call("get_weather", {"city": "Paris"}, call_id=call_id)
    assert late_results([*events, *again.events, late_response(call_id)]) == ()
    # Stored JSON is read the same way.
    as_json = [e.model_dump(mode="json", exclude_none=True)
               for e in [*events, late_response(call_id)]]
    assert len(late_results(as_json, STORED_JSON)) == 1


def test_a_heal_still_answering_a_dead_call_is_kept() -> None:
    """A heal of two calls, only one of which got its real response, is not taken out."""
    history = History(start=1_700_000_000.0)
    history.user("weather and time?")
    first, second = history.calls(("get_weather", {}), ("get_time", {}))
    assert first is not None and second is not None
    call_event = history.events[-1]
    heal = Event(id=f"{call_event.id}-heal", invocation_id="inv-1", author="assistant",
                 custom_metadata={"adk_session_heal": {
                     "synthetic": True, "call_event_id": call_event.id,
                     "call_ids": [first, second]}},
                 content=types.Content(role="user", parts=[
                     types.Part(function_response=types.FunctionResponse(
                         id=call_id, name="t", response={"error": "x"}))
                     for call_id in (first, second)]))
    assert late_results([*history.events, heal, late_response(first)]) == ()
    both = [*history.events, heal, late_response(first),
            late_response(second, event_id="late-2")]
    assert [f.response_event_ids for f in late_results(both)] == [("late-1", "late-2")]


async def test_get_session_takes_back_a_heal_when_the_real_response_was_stored_elsewhere(
    store_factory: ServiceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Another replica stores the real response: the next read removes the heal, once."""
    now = time.time()
    inner = await store_factory()
    history, call_id = crashed(now)
    session = await stored(inner, history)
    wrapper = HealingSessionService(inner)
    healed = await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert healed is not None and len(heals_in(healed.events)) == 1

    replica = await reread(store_factory, session.id)
    await (await store_factory()).append_event(replica, late_response(call_id))
    with caplog.at_level(logging.WARNING, logger="adk_session_heal"):
        taken = await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert taken is not None and heals_in(taken.events) == []
    after = await reread(store_factory, session.id)
    assert heals_in(after.events) == []
    assert outline(after.events) == ["weather in Paris?", "call", "hello?",
                                     "Sorry, the weather tool failed.", "response:temp_c"]
    findings = classify(after.events, now=time.time())
    assert not findings.duplicate_responses and not findings.needs_healing
    assert sum("took back heal" in r.getMessage() for r in caplog.records) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="adk_session_heal"):
        again = await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert again is not None and len(again.events) == len(after.events)
    assert caplog.records == []


async def test_append_event_takes_back_the_heal_as_the_real_response_is_stored(
    store_factory: ServiceFactory,
) -> None:
    """The runner that outlived stale_after appends its result: the heal goes at once."""
    now = time.time()
    inner = await store_factory()
    history = History(start=now - 3600)
    history.user("weather in Paris?")
    call_id = history.call("get_weather", {"city": "Paris"})
    session = await stored(inner, history)
    runner_view = await reread(store_factory, session.id)  # the slow tool's runner holds this
    wrapper = HealingSessionService(inner, policy=HealPolicy(stale_after=60))
    healed = await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert healed is not None and len(heals_in(healed.events)) == 1

    await wrapper.append_event(runner_view, late_response(call_id, event_id="late-1"))
    assert heals_in(runner_view.events) == []
    after = await reread(store_factory, session.id)
    assert outline(after.events) == ["weather in Paris?", "call", "response:temp_c"]


async def test_removals_are_recorded_in_the_ledger_with_the_heal_kept_in_history(
    tmp_path: Path,
) -> None:
    """The removals table says which heal went, why, who and what superseded it."""
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    inner = DatabaseSessionService(url)
    history, call_id = crashed(time.time())
    session = await stored(inner, history)
    await upgrade(url)
    ledger = SqlHealLedger.from_url(url)
    wrapper = HealingSessionService(inner, ledger=ledger)
    await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)
    fresh = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert fresh is not None
    await inner.append_event(fresh, late_response(call_id))
    await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)
    (removal,) = await ledger.removals()
    assert (removal.event_id, removal.call_ids, removal.reason.value, removal.removed_by,
            removal.detail) == ("e-0002-heal", (call_id,), "late_result", "wrapper", ("late-1",))
    assert [r.synthetic_event_id for r in await ledger.history()] == ["e-0002-heal"]
    await ledger.close()
    await inner.close()


async def test_a_store_without_deletes_keeps_the_heal_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Through append_event alone a row cannot be removed: the heal stays, one WARNING as the
    response is appended, none on later reads."""
    inner = AppendingInMemoryService()
    history, call_id = crashed(time.time() - 3600)
    session = await stored(inner, history)
    wrapper = HealingSessionService(inner)
    await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)
    fresh = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert fresh is not None and len(heals_in(fresh.events)) == 1
    with caplog.at_level(logging.WARNING, logger="adk_session_heal"):
        await wrapper.append_event(fresh, late_response(call_id))
    assert len(heals_in(fresh.events)) == 1
    assert any("cannot delete rows" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="adk_session_heal"):
        for _ in range(2):  # later reads neither warn again nor write
            read = await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)
            assert read is not None and len(read.events) == len(fresh.events)
    assert caplog.records == []


async def _store_late_response(store: Store, session_id: str) -> None:
    """Another process stores the dead call's real response through the store's own ADK service."""
    service = store.service()
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
        assert session is not None
        (call,) = [c for e in session.events for c in e.get_function_calls()]
        assert call.id is not None
        await service.append_event(session, late_response(call.id, invocation_id="inv-1"))
    finally:
        await close(service)


async def test_repair_takes_back_superseded_heals_once_and_records_them(
        adk_store: Store) -> None:
    """scan reports a superseded heal, --dry-run writes nothing, repair removes it once."""
    history, _ = crashed(1_700_000_000.0)
    await fill(adk_store, {"late": history})
    assert cli("db", "upgrade", adk_store.url).exit_code == 0
    assert cli("repair", adk_store.url, "--yes").exit_code == 0
    await _store_late_response(adk_store, "late")

    scanned = cli("scan", adk_store.url, "--json")
    assert scanned.exit_code == 1, scanned.output
    found = json.loads(scanned.stdout)
    assert found["counts"]["superseded_heals"] == 1 and found["counts"]["dead_calls"] == 0
    assert found["superseded_heals"][0]["synthetic_event_id"] == "e-0002-heal"
    assert found["superseded_heals"][0]["response_event_ids"] == ["late-1"]
    before = await snapshot(adk_store)
    dry = json.loads(cli("repair", adk_store.url, "--dry-run", "--json").stdout)
    assert [(r["synthetic_event_id"], r["outcome"]) for r in dry["removals"]] == [
        ("e-0002-heal", None)]
    assert await snapshot(adk_store) == before

    done = cli("repair", adk_store.url, "--yes", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["taken_back"] == 1 and report["healed"] == 0
    assert "superseded heals taken back: 1 of 1" in done.stderr
    service = adk_store.service()
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id="late")
        assert session is not None
        assert outline(session.events) == ["weather in Paris?", "call", "hello?",
                                           "Sorry, the weather tool failed.", "response:temp_c"]
    finally:
        await close(service)
    ledger = SqlHealLedger.from_url(adk_store.url)
    try:
        (removal,) = await ledger.removals()
        assert (removal.event_id, removal.removed_by, removal.detail) == (
            "e-0002-heal", "repair", ("late-1",))
    finally:
        await ledger.close()
    after = await snapshot(adk_store)
    again = json.loads(cli("repair", adk_store.url, "--yes", "--json").stdout)
    assert again["taken_back"] == 0 and again["removals"] == []
    assert await snapshot(adk_store) == after


async def test_repair_with_a_ledger_below_0003_refuses_in_one_line(tmp_path: Path) -> None:
    """Taking heals back needs the removals table: one line, exit 2, nothing written."""
    async for store in make_store("db_sqlite", tmp_path):
        history, _ = crashed(1_700_000_000.0)
        await fill(store, {"late": history})
        assert cli("repair", store.url, "--yes", "--no-ledger").exit_code == 0
        await _store_late_response(store, "late")
        assert cli("db", "upgrade", store.url, "--revision", "0002").exit_code == 0
        before = await snapshot(store)
        assert_one_line_error(cli("repair", store.url, "--yes"), "db upgrade")
        assert await snapshot(store) == before


async def test_repair_keeps_a_superseded_heal_edited_since_and_says_so(adk_store: Store) -> None:
    """A heal with a support note appended, then superseded by its real response: repair keeps
    it (as edited), says so in its summary and removals, and exits 3."""
    history, _ = crashed(1_700_000_000.0)
    await fill(adk_store, {"late": history})
    assert cli("db", "upgrade", adk_store.url).exit_code == 0
    assert cli("repair", adk_store.url, "--yes").exit_code == 0
    await change_one_heal(adk_store, "late", "e-0002-heal")
    await _store_late_response(adk_store, "late")
    done = cli("repair", adk_store.url, "--yes", "--json")
    assert done.exit_code == 3, done.output
    assert [(r["synthetic_event_id"], r["outcome"]) for r in json.loads(done.stdout)[
        "removals"]] == [("e-0002-heal", "kept")]
    assert ("superseded heals taken back: 0 of 1 (1 kept: changed since written, or not ours)"
            in done.stderr)
    assert "edited by hand" in str(await event_rows(adk_store))
