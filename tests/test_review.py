"""Operator review: list the healed calls to check, resolve one with its true outcome."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from stores import (
    APP,
    USER,
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    close,
    fill,
    make_store,
    snapshot,
)
from test_cli import assert_one_line_error, cli

from adk_session_heal.bulk import repair
from adk_session_heal.event_access import STORED_JSON
from adk_session_heal.findings import classify
from adk_session_heal.healing import SessionHeals
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.policy import HealPolicy, ToolEffect
from adk_session_heal.review import plan_resolution, review_entries
from adk_session_heal.session_key import SessionKey
from adk_session_heal.store import SessionFilter, open_store
from adk_session_heal.testing import History, outline

POLICY = HealPolicy(stale_after=3600, tool_effects={"get_weather": ToolEffect.READ_ONLY})


def paid_and_asked() -> History:
    """charge_card and get_weather both die; the user comes back."""
    history = History()
    history.user("pay my order and tell me the weather")
    history.calls(("charge_card", {"amount": 42, "card_token": "tok_live_secret"}),
                  ("get_weather", {"city": "Paris"}), ids=["pay-1", "wx-1"])
    history.user("hello?")
    return history


async def healed_store(store: Store) -> None:
    """Stores the crashed session and heals it (read_only get_weather, unknown charge_card)."""
    await fill(store, {"shop": paid_and_asked()})
    assert cli("db", "upgrade", store.url).exit_code == 0
    await repair(store.url, policy=POLICY)


async def adk_events(store: Store, *, clean: bool = True) -> list[str]:
    """The session as the store's own ADK service reads it, in outline (``clean``: no call
    answered twice)."""
    service = store.service()
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id="shop")
        assert session is not None
        assert not clean or not classify(session.events, now=time.time()).duplicate_responses
        return outline(session.events)
    finally:
        await close(service)


async def test_review_lists_only_side_effect_or_unknown_calls_that_may_have_run(
        adk_store: Store) -> None:
    """charge_card (unknown effect) is listed with its token redacted; read-only get_weather not."""
    await healed_store(adk_store)
    listed = cli("review", adk_store.url, "--json")
    assert listed.exit_code == 0, listed.output
    (call,) = json.loads(listed.stdout)["calls"]
    assert (call["session_id"], call["call_id"], call["tool_name"], call["status"],
            call["tool_effect"], call["run_outcome"]) == (
        "shop", "pay-1", "charge_card", "healed", "unknown", "unknown")
    assert call["args"] == '{"amount": 42, "card_token": "***"}'
    assert "tok_live_secret" not in listed.output
    assert call["age_seconds"] > 0
    tsv = cli("review", "list", adk_store.url)
    assert tsv.stdout.splitlines()[0].startswith("kind\tapp_name")
    assert "review resolve CALL_ID" in tsv.stderr


async def test_resolve_writes_the_true_outcome_takes_back_the_heal_and_records_who(
        adk_store: Store) -> None:
    """The resolution answers the call, the heal goes, the ledger says who and when; once."""
    await healed_store(adk_store)
    done = cli("review", "resolve", "pay-1", adk_store.url, "--result", '{"charged": true}',
               "--by", "alice", "--yes", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["written"], report["resolved_by"], report["response"]) == (
        True, "alice", {"charged": True})
    assert [r["outcome"] for r in report["removals"]] == ["removed"]
    assert await adk_events(adk_store) == [
        "pay my order and tell me the weather", "call", "response:charged", "hello?"]

    store = await open_store(adk_store.url)
    try:
        (session,) = [s async for s in store.stream_sessions(SessionFilter())]
    finally:
        await store.close()
    (resolution,) = [e for e in session.events if STORED_JSON.heal_marker(e)]
    marker = STORED_JSON.heal_marker(resolution) or {}
    assert (marker["reason"], marker["resolved_by"], marker["call_ids"]) == (
        "resolved", "alice", ["pay-1", "wx-1"])
    responses = {p["function_response"]["id"]: p["function_response"]["response"]
                 for p in resolution["content"]["parts"]}
    assert responses["pay-1"] == {"charged": True} and "error" in responses["wx-1"]

    ledger = SqlHealLedger.from_url(adk_store.url)
    try:
        (removal,) = await ledger.removals()
        assert (removal.reason.value, removal.removed_by, removal.detail) == (
            "resolved", "alice", (report["synthetic_event_id"],))
        assert [(r.trigger.value, r.reason) for r in await ledger.history()] == [
            ("repair", "superseded"), ("review", "resolved")]
    finally:
        await ledger.close()

    assert json.loads(cli("review", adk_store.url, "--json").stdout)["calls"] == []
    before = await snapshot(adk_store)
    again = json.loads(cli("review", "resolve", "pay-1", adk_store.url, "--result",
                           '{"charged": true}', "--by", "alice", "--yes", "--json").stdout)
    assert again["written"] is False and again["removals"] == []
    assert await snapshot(adk_store) == before


@pytest.mark.parametrize("by_repair", [True, False], ids=["repair", "rerun"])
async def test_an_interrupted_resolve_is_finished_by_repair_or_a_rerun(
        tmp_path: Path, by_repair: bool) -> None:
    """Killed between writing the resolution and taking back the heal: repair (which sees the
    resolution supersede the heal) or the same command again finishes it, writing nothing twice."""
    async for store in make_store("db_sqlite", tmp_path):
        await healed_store(store)
        opened = await open_store(store.url, writable=True)
        try:
            (session,) = [s async for s in opened.stream_sessions(SessionFilter())]
            heal, _ = plan_resolution(session.events, session.key, "pay-1", {"error": "declined"},
                                      by="bob", at=time.time())
            await opened.write([SessionHeals(session.key, None, (heal,))], ledger=True)
        finally:
            await opened.close()
        assert len([w for w in await adk_events(store, clean=False)
                    if w.startswith("response")]) == 2
        if by_repair:
            assert json.loads(cli("repair", store.url, "--yes", "--json").stdout)[
                "taken_back"] == 1
        done = json.loads(cli("review", "resolve", "pay-1", store.url, "--failed", "declined",
                              "--by", "bob", "--yes", "--json").stdout)
        assert done["written"] is False
        assert [r["outcome"] for r in done["removals"]] == ([] if by_repair else ["removed"])
        assert await adk_events(store) == [
            "pay my order and tell me the weather", "call", "response:error", "hello?"]


def test_review_entries_skip_resolved_and_superseded_heals() -> None:
    """A resolution, and the heal it answers for, are never listed again."""
    history = paid_and_asked()
    events = [e.model_dump(mode="json", exclude_none=True) for e in history.events]
    key = SessionKey("app", "user", "s")
    findings = classify(events, STORED_JSON, now=time.time())
    assert {e.call_id for e in review_entries(events, findings, key)} == {"pay-1", "wx-1"}
    assert all(e.status == "dead" for e in review_entries(events, findings, key))


async def test_bad_resolve_input_is_one_line(tmp_path: Path) -> None:
    """Unknown call, bad JSON, both or neither outcome, no --yes: one line, exit 2, no write."""
    async for store in make_store("db_sqlite", tmp_path):
        await healed_store(store)
        before = await snapshot(store)
        assert_one_line_error(cli("review", "resolve", "nope", store.url, "--failed", "x",
                                  "--yes"), "no heal answers call 'nope'")
        assert_one_line_error(cli("review", "resolve", "pay-1", store.url, "--result", "{oops",
                                  "--yes"), "--result is not JSON")
        assert_one_line_error(cli("review", "resolve", "pay-1", store.url, "--yes"),
                              "exactly one of")
        assert_one_line_error(cli("review", "resolve", "pay-1", store.url, "--failed", "x"),
                              "--yes")
        assert await snapshot(store) == before


async def test_a_call_id_healed_in_two_sessions_needs_session(tmp_path: Path) -> None:
    """The same call id healed in two sessions: one line naming --session; with it, one
    session is resolved and the other keeps its heal."""
    async for store in make_store("db_sqlite", tmp_path):
        await fill(store, {"shop": paid_and_asked(), "shop2": paid_and_asked()})
        assert cli("db", "upgrade", store.url).exit_code == 0
        await repair(store.url, policy=POLICY)
        before = await snapshot(store)
        assert_one_line_error(cli("review", "resolve", "pay-1", store.url, "--failed", "x",
                                  "--yes"), "healed in 2 sessions: pass --session")
        assert await snapshot(store) == before
        done = json.loads(cli("review", "resolve", "pay-1", store.url, "--session", "shop2",
                              "--failed", "declined", "--yes", "--json").stdout)
        assert done["session_id"] == "shop2" and done["written"] is True
        listed = json.loads(cli("review", store.url, "--json").stdout)["calls"]
        assert [(c["session_id"], c["call_id"]) for c in listed] == [("shop", "pay-1")]
