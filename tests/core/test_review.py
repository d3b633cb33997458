"""Operator review: list the healed calls to check, resolve one with its true outcome."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import assert_one_line_error, cli
from click.testing import Result
from conftest import ServiceFactory
from google.adk.events.event import Event
from google.adk.sessions import Session
from google.genai import types
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from stored_rows import stored_events
from stores import (
    APP,
    CLI_KINDS,
    USER,
    Store,
    adk_store_fixture,  # noqa: F401  (the adk_store fixture)
    close,
    fill,
    heal_ledger_at,
    make_store,
    snapshot,
)

from adk_session_heal import ScanOptions
from adk_session_heal.core.event_access import STORED_JSON
from adk_session_heal.core.findings import classify
from adk_session_heal.core.healing import SessionHeals
from adk_session_heal.core.review import MAX_RESPONSE_DEPTH, plan_resolution, review_entries
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.errors import ResolutionError
from adk_session_heal.ledger import SqlHealLedger
from adk_session_heal.ops.operator_review import ResolveReport, resolve
from adk_session_heal.ops.repair import repair
from adk_session_heal.policy import HealPolicy, ToolEffect
from adk_session_heal.runtime.service import HealingSessionService
from adk_session_heal.store import SessionFilter, open_store, store_for_service
from adk_session_heal.store.base import Removal, RemovalReason, ResolveOutcome
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
    await repair(store.url, ScanOptions(policy=POLICY))


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
        await repair(store.url, ScanOptions(policy=POLICY))
        before = await snapshot(store)
        assert_one_line_error(cli("review", "resolve", "pay-1", store.url, "--failed", "x",
                                  "--yes"), "healed in 2 sessions: pass --session")
        assert await snapshot(store) == before
        done = json.loads(cli("review", "resolve", "pay-1", store.url, "--session", "shop2",
                              "--failed", "declined", "--yes", "--json").stdout)
        assert done["session_id"] == "shop2" and done["written"] is True
        listed = json.loads(cli("review", store.url, "--json").stdout)["calls"]
        assert [(c["session_id"], c["call_id"]) for c in listed] == [("shop", "pay-1")]


# -- every resolve is stored or refused (issue 28, points 1 and 2) --------------------------


@pytest.fixture(params=CLI_KINDS, name="cli_store")
async def cli_store_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh, empty store of each layout `review resolve` writes: the SQL ones and Redis."""
    async for store in make_store(request.param, tmp_path):
        yield store


async def healed_on(store: Store, *histories: str) -> None:
    """Stores the crashed ``shop`` session (and more copies), ledger at head, and heals it."""
    await fill(store, {name: paid_and_asked() for name in ("shop", *histories)})
    if store.kind != "redis":  # Redis's ledger needs no migration
        assert cli("db", "upgrade", store.url).exit_code == 0
    await repair(store.url, ScanOptions(policy=POLICY))


async def stored_session(store: Store, session_id: str = "shop") -> list[dict[str, Any]]:
    """The session's events as stored (JSON), through the store's one adapter."""
    opened = await open_store(store.url)
    try:
        return [e for s in [s async for s in opened.stream_sessions(
            SessionFilter(session_id=session_id))] for e in s.events]
    finally:
        await opened.close()


def answers_to(events: list[dict[str, Any]], call_id: str) -> list[tuple[str, Any]]:
    """Every stored response to ``call_id``: (event id, response)."""
    return [(e["id"], p["function_response"]["response"]) for e in events
            for p in (e.get("content") or {}).get("parts") or []
            if (p.get("function_response") or {}).get("id") == call_id]


def resolve_cli(store: Store, outcome: Any, by: str, *more: str) -> Result:
    """`review resolve pay-1 URL --result JSON --by NAME --yes --json`."""
    return cli("review", "resolve", "pay-1", store.url, "--result", json.dumps(outcome),
               "--by", by, "--yes", "--json", *more)


async def test_four_successive_corrections_store_the_fourth_and_record_each(
        cli_store: Store) -> None:
    """Four corrections of one call: each a resolution of its own id superseding the one
    before; the fourth answers the call (ADK reads it), the ledger keeps all four (who, when,
    what); an identical repeat writes nothing; A, B, A again gets a fifth id."""
    await healed_on(cli_store)
    (heal_id, _), = answers_to(await stored_session(cli_store), "pay-1")
    outcomes = [{"charged": False}, {"charged": True, "amount": 5},
                {"charged": True, "amount": 7}, {"refunded": True}]
    ids = []
    for n, outcome in enumerate(outcomes):
        done = resolve_cli(cli_store, outcome, f"op{n}")
        assert done.exit_code == 0, done.output
        report = json.loads(done.stdout)
        assert report["written"] is True and [r["outcome"] for r in report["removals"]] == [
            "removed"]
        ids.append(report["synthetic_event_id"])
    assert len(set(ids)) == 4 and heal_id not in ids
    events = await stored_session(cli_store)
    assert answers_to(events, "pay-1") == [(ids[3], {"refunded": True})]
    assert [e for e, _ in answers_to(events, "wx-1")] == [ids[3]]  # its heal answer, kept
    assert await adk_events(cli_store) == [
        "pay my order and tell me the weather", "call", "response:refunded", "hello?"]

    async with heal_ledger_at(cli_store.url) as ledger:
        records = await ledger.resolutions()
        assert [(r.synthetic_event_id, r.supersedes, r.resolved_by, dict(r.response),
                 r.call_id, r.call_event_id) for r in records] == [
            (ids[n], ([heal_id] + ids)[n], f"op{n}", outcomes[n], "pay-1", "e-0002")
            for n in range(4)]
        assert [(r.event_id, r.removed_by) for r in await ledger.removals()] == [
            (([heal_id] + ids)[n], f"op{n}") for n in range(4)]
        assert sorted(r.synthetic_event_id for r in await ledger.history()
                      if r.trigger.value == "review") == sorted(ids)

    before = await snapshot(cli_store)
    again = resolve_cli(cli_store, outcomes[3], "op3")
    assert again.exit_code == 0 and json.loads(again.stdout)["written"] is False
    assert await snapshot(cli_store) == before
    back = resolve_cli(cli_store, outcomes[0], "op0")
    assert back.exit_code == 0, back.output
    assert json.loads(back.stdout)["synthetic_event_id"] not in ids
    assert answers_to(await stored_session(cli_store), "pay-1")[0][1] == outcomes[0]


@pytest.mark.parametrize("operators", [2, 8])
async def test_concurrent_resolutions_on_separate_connections_store_exactly_one(
        store_factory: ServiceFactory, operators: int) -> None:
    """Operators who all planned against the same heal commit at once, each on a connection
    of its own: exactly one resolution answers the call; every other finds the heal gone and
    writes nothing (every layout)."""
    inner = await store_factory()
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in paid_and_asked().events:
        await inner.append_event(session, event)
    await HealingSessionService(inner, policy=POLICY).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    key = SessionKey.of(session)
    barrier = asyncio.Barrier(operators)

    async def operator(n: int) -> tuple[ResolveOutcome, str]:
        service = await store_factory()  # its own connections (in memory: the one service)
        await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        rows = await stored_events(service, key)
        heal, superseded = plan_resolution(rows, key, "pay-1", {"charged": n}, by=f"op{n}",
                                           at=time.time())
        marker = STORED_JSON.heal_marker(superseded) or {}
        removal = Removal(key, superseded["id"], marker["call_event_id"],
                          tuple(marker["call_ids"]), RemovalReason.RESOLVED, time.time(),
                          f"op{n}", (heal.event_id,))
        await barrier.wait()
        result = await store_for_service(service, session).resolve(heal, removal, ledger=False)
        return result.outcome, heal.event_id

    results = await asyncio.gather(*(operator(n) for n in range(operators)))
    assert sorted(outcome.value for outcome, _ in results) == sorted(
        ["written"] + ["superseded_gone"] * (operators - 1))
    (winner,) = [event_id for outcome, event_id in results if outcome is ResolveOutcome.WRITTEN]
    rows = await stored_events(inner, key)
    assert [event_id for event_id, _ in answers_to(rows, "pay-1")] == [winner]
    assert not classify(rows, STORED_JSON, now=time.time()).duplicate_responses


@pytest.mark.slow
async def test_concurrent_resolve_commands_lose_no_outcome(cli_store: Store) -> None:
    """Eight operators run `review resolve` at once, as processes (2 and 8 operators at once on
    separate connections, every layout, are the test above): each is stored or refused in one
    line naming what is stored; the stored resolutions form one chain from the heal (none
    superseded the same answer, so no outcome was silently replaced) whose last answers the
    call, alone; the ledger holds exactly the ones that exited 0."""
    await healed_on(cli_store)
    (heal_id, _), = answers_to(await stored_session(cli_store), "pay-1")
    runs = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "adk_session_heal", "review", "resolve", "pay-1", cli_store.url,
        "--result", json.dumps({"charged": n}), "--by", f"op{n}", "--yes", "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        for n in range(8)]
    outputs = [await run.communicate() for run in runs]
    codes = [run.returncode for run in runs]
    assert set(codes) <= {0, 2} and 0 in codes, outputs
    winners = {f"op{n}" for n, code in enumerate(codes) if code == 0}
    for code, (_, stderr) in zip(codes, outputs, strict=True):
        if code == 2:
            line = stderr.decode().strip()
            assert line.count("\n") == 0 and line.startswith(
                "Error: call 'pay-1' was answered meanwhile, now by the resolution by op"), line
            assert line.split("the resolution by ")[1].split(" ")[0] in winners, line
    async with heal_ledger_at(cli_store.url) as ledger:
        records = {r.supersedes: r for r in await ledger.resolutions()}
    assert {r.resolved_by for r in records.values()} == winners
    chain, at = [], heal_id
    while at in records:
        chain.append(records[at])
        at = records[at].synthetic_event_id
    assert len(chain) == len(records) == len(winners)
    assert answers_to(await stored_session(cli_store), "pay-1") == [
        (chain[-1].synthetic_event_id, dict(chain[-1].response))]


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
async def test_a_resolve_that_lost_the_race_names_what_is_stored(
        tmp_path: Path, kind: str) -> None:
    """Two resolves planned against the same heal while the session's row is locked: once it
    is free, one writes, the other writes nothing and says in one line what answers now."""
    async for store in make_store(kind, tmp_path):
        await healed_on(store)
        engine = create_async_engine(store.url)
        try:
            async with engine.connect() as holder:
                await holder.execute(text(
                    "SELECT id FROM sessions WHERE id = 'shop' FOR UPDATE"))
                tasks = [asyncio.create_task(resolve(
                    store.url, "pay-1", {"charged": n}, by=f"op{n}")) for n in range(2)]
                while await _waiting_for_locks(engine, kind) < 2:
                    assert not any(t.done() for t in tasks), [t.result() for t in tasks]
                    await asyncio.sleep(0.05)
                await holder.rollback()
            done = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await engine.dispose()
        (report,) = [r for r in done if isinstance(r, ResolveReport)]
        (error,) = [r for r in done if isinstance(r, ResolutionError)]
        assert str(error) == (
            f"call 'pay-1' was answered meanwhile, now by the resolution by "
            f"{report.resolved_by} (event {report.resolution_event_id}): "
            f"{json.dumps(report.response, sort_keys=True)}: nothing written; check it, then "
            "resolve again to change it")


async def _waiting_for_locks(engine: AsyncEngine, kind: str) -> int:
    """How many connections of this database wait to lock the session's row.

    MariaDB's wait shows in its process list (the row is read, and waited for, while the
    statement is in its "Statistics" phase; ``innodb_trx`` may not list it yet).
    """
    query = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
             "AND datname = current_database() AND query LIKE :locking"
             if kind == "postgres" else
             "SELECT count(*) FROM information_schema.processlist WHERE db = DATABASE() "
             "AND info LIKE :locking")
    async with engine.connect() as conn:
        return int((await conn.execute(text(query), {
            "locking": "SELECT id FROM sessions WHERE app_name = %FOR UPDATE"})).scalar_one())


async def test_resolve_refuses_a_call_its_real_response_answers(cli_store: Store) -> None:
    """pay-1's real response stored after its heal: review no longer lists it and resolve
    refuses in one line, writing nothing (before, it wrote a second answer that the next
    repair then deleted as a late result)."""
    await healed_on(cli_store)
    await _answer_for_real(cli_store, "pay-1", {"charged": True})
    assert [c["call_id"] for c in json.loads(
        cli("review", cli_store.url, "--json").stdout)["calls"]] == []
    before = await snapshot(cli_store)
    assert_one_line_error(resolve_cli(cli_store, {"charged": False}, "alice"),
                          "call 'pay-1' in session 'shop' already has its real response",
                          "nothing to resolve")
    assert await snapshot(cli_store) == before


async def test_a_parallel_heals_resolution_answers_only_calls_still_unanswered(
        cli_store: Store) -> None:
    """wx-1's real response came after the heal of both calls: resolving pay-1 answers pay-1
    alone (wx-1 is not re-stated as interrupted), and the heal goes; every call is answered
    once, for every reader."""
    await healed_on(cli_store)
    await _answer_for_real(cli_store, "wx-1", {"temp_c": 21})
    done = resolve_cli(cli_store, {"charged": True}, "alice")
    assert done.exit_code == 0, done.output
    resolution = json.loads(done.stdout)["synthetic_event_id"]
    events = await stored_session(cli_store)
    assert answers_to(events, "pay-1") == [(resolution, {"charged": True})]
    assert [e for e, _ in answers_to(events, "wx-1")] == ["late-wx-1"]
    assert not classify(events, STORED_JSON, now=time.time()).duplicate_responses
    assert await adk_events(cli_store) == [
        "pay my order and tell me the weather", "call", "response:charged", "hello?",
        "response:temp_c"]


async def _answer_for_real(store: Store, call_id: str, response: dict[str, Any]) -> None:
    """The tool's real response, stored late through the store's own ADK service."""
    service = store.service()
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id="shop")
        assert session is not None
        name = "charge_card" if call_id == "pay-1" else "get_weather"
        await service.append_event(session, Event(
            id=f"late-{call_id}", invocation_id=session.events[1].invocation_id,
            author="assistant", timestamp=time.time(), content=types.Content(
                role="user", parts=[types.Part(function_response=types.FunctionResponse(
                    id=call_id, name=name, response=response))])))
    finally:
        await close(service)


BAD_INPUT = [
    (["--failed", "caf\udce9"], "--failed holds text that is not valid Unicode"),
    (["--result", '{"n": "\\ud83d"}'],
     "--result holds text that is not valid Unicode at $.n (a lone surrogate"),
    (["--result", '{"note": "a\\u0000b"}'],
     "--result holds a NUL character at $.note, which PostgreSQL"),
    (["--failed", "declined", "--by", "al\udce9"], "--by holds text that is not valid Unicode"),
    (["--result", "[" * 150 + "]" * 150], "--result nests deeper than 100 levels"),
    (["--result", "[" * 5000 + "]" * 5000], "--result nests deeper than 100 levels"),
    (["--result", '{"n": ' + "9" * 5000 + "}"], "--result holds an integer of more than 4300"),
    (["--result", '{"n": NaN}'], "--result holds nan (at $.n), which is not JSON"),
    (["--result", "Infinity"], "--result holds inf (at $.result), which is not JSON"),
]


async def test_resolve_refuses_what_adk_could_not_read_back(cli_store: Store) -> None:
    """Text that is not Unicode, a NUL, nesting deeper than ADK's JSON parser reads, an integer
    or a number JSON readers refuse: one line naming it, exit 2, nothing written (every
    layout, PostgreSQL's NUL included)."""
    await healed_on(cli_store)
    before = await snapshot(cli_store)
    for options, words in BAD_INPUT:
        assert_one_line_error(cli("review", "resolve", "pay-1", cli_store.url, *options,
                                  "--yes"), words)
    assert await snapshot(cli_store) == before


async def test_the_deepest_accepted_response_reads_back_through_adk(cli_store: Store) -> None:
    """A response nested MAX_RESPONSE_DEPTH levels is stored, and the store's own ADK service
    reads the session back (Redis: Session.model_validate_json)."""
    await healed_on(cli_store)
    nested: Any = 1
    for _ in range(MAX_RESPONSE_DEPTH - 1):
        nested = [nested]
    done = resolve_cli(cli_store, {"n": nested}, "alice")
    assert done.exit_code == 0, done.output
    assert (await adk_events(cli_store))[2] == "response:n"


def test_the_depth_limit_leaves_room_below_what_adk_reads() -> None:
    """ADK's readers parse a session with pydantic, which refuses a response nested 194 levels
    (Redis's Session.model_validate_json) and reads MAX_RESPONSE_DEPTH (100) levels."""
    def session_with(depth: int) -> str:
        nested: Any = 1
        for _ in range(depth - 1):
            nested = [nested]
        event = Event(author="a", content=types.Content(role="user", parts=[types.Part(
            function_response=types.FunctionResponse(id="c", name="t",
                                                     response={"n": nested}))]))
        return Session(id="s", app_name="a", user_id="u", events=[event]).model_dump_json()

    Session.model_validate_json(session_with(MAX_RESPONSE_DEPTH))
    with pytest.raises(ValidationError, match="recursion limit exceeded"):
        Session.model_validate_json(session_with(194))


def test_bytes_that_are_not_utf8_on_the_command_line_are_refused(tmp_path: Path) -> None:
    """`--failed $'caf\\xe9'` as a shell passes it (raw bytes) and `--result '{"n":"\\ud83d"}'`:
    the real process exits 2 with one line, and nothing is written."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.db'}"
    for args, words in (([b"--failed", b"caf\xe9"], b"--failed holds text that is not valid"),
                        ([b"--result", b'{"n":"\\ud83d"}'], b"--result holds text that is not")):
        run = subprocess.run([sys.executable, "-m", "adk_session_heal", "review", "resolve",
                              "pay-1", url, *args, "--yes"], capture_output=True,
                             env={**os.environ, "LC_ALL": "C.UTF-8"}, check=False)
        assert run.returncode == 2 and run.stderr.count(b"\n") == 1, run.stderr
        assert words in run.stderr, run.stderr
    assert not (tmp_path / "db.db").exists()
