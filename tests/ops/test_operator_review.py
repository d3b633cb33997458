"""Tests for ops/operator_review.py and the operator runs' reconcile hooks: ``review`` lists only
what no hook could settle, ``scan``/``repair`` ask hooks before they heal a call in doubt, and the
CLI imports hooks with ``--reconcile MODULE:NAME`` (a real SQLite store and ledger)."""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import assert_one_line_error, cli
from stores import APP, USER, Store, adk_store_fixture, fill  # noqa: F401

from adk_session_heal import ScanOptions
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.ops.operator_review import review
from adk_session_heal.ops.repair import repair
from adk_session_heal.ops.scan import scan
from adk_session_heal.policy import (
    NOT_STARTED_ERROR,
    CallOutcome,
    DoubtfulCall,
    HealPolicy,
    Reconciliation,
    ToolEffect,
    effect_payload,
    settled,
)
from adk_session_heal.testing import History

SQLITE = pytest.mark.parametrize("adk_store", ["db_sqlite"], indirect=True)


def _charged_and_emailed() -> History:
    """A charge and an email die in one turn; the user comes back (both superseded)."""
    history = History()
    history.user("pay and send the receipt")
    history.calls(("charge_card", {"amount": 42}), ("send_email", {"to": "a@b.c"}),
                  ids=["pay-1", "mail-1"])
    history.user("hello?")
    return history


async def _dead_store(store: Store) -> dict[str, str]:
    """Stores the crashed session, upgrades the ledger; the calls' idempotency keys by call id."""
    await fill(store, {"shop": _charged_and_emailed()})
    assert cli("db", "upgrade", store.url).exit_code == 0
    listed = await review(store.url)
    return {entry.call_id: entry.idempotency_key for entry in listed.calls}


def _hooks(answers: dict[str, Reconciliation | Exception],
           asked: list[DoubtfulCall]) -> dict[str, Any]:
    """charge_card's hook: the answer stored for the asked call's key (or raises it)."""
    async def charge_made(call: DoubtfulCall) -> Reconciliation:
        asked.append(call)
        answer = answers[call.idempotency_key]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return {"charge_card": charge_made}


def _heals(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each healed call's response, by call id, from a session's stored events."""
    found = {}
    for event in events:
        if HEAL_METADATA_KEY not in (event.get("custom_metadata") or {}):
            continue
        for part in event["content"]["parts"]:
            response = part["function_response"]
            found[response["id"]] = response["response"]
    return found


async def _stored(store: Store) -> list[dict[str, Any]]:
    """The session's stored events, as JSON, through the store's reader."""
    from adk_session_heal.store import SessionFilter, open_store
    opened = await open_store(store.url)
    try:
        (session,) = [s async for s in opened.stream_sessions(SessionFilter(session_id="shop"))]
        return list(session.events)
    finally:
        await opened.close()


@SQLITE
async def test_review_lists_only_the_calls_no_hook_could_settle(adk_store: Store) -> None:
    """A charge its hook finds is not listed (and counted); send_email, without a hook, is."""
    keys = await _dead_store(adk_store)
    asked: list[DoubtfulCall] = []
    report = await review(adk_store.url, reconcile=_hooks(
        {keys["pay-1"]: settled({"receipt": "r-42"})}, asked))
    assert [entry.call_id for entry in report.calls] == ["mail-1"]
    assert report.settled_by_hooks == 1
    assert [(c.call_id, c.tool_name, c.idempotency_key) for c in asked] == [
        ("pay-1", "charge_card", keys["pay-1"])]
    assert report.summary_line().endswith("1 call settled by reconcile hooks, not listed")
    assert report.to_json()["settled_by_hooks"] == 1
    assert (await review(adk_store.url)).settled_by_hooks is None


@SQLITE
@pytest.mark.parametrize("failure", ["unknown", "raises"])
async def test_review_still_lists_a_call_its_hook_cannot_settle(adk_store: Store,
                                                                 failure: str) -> None:
    """A hook that cannot tell, or raises: the charge stays on the list for a person."""
    keys = await _dead_store(adk_store)
    answer: Reconciliation | Exception = (settled(happened=None) if failure == "unknown"
                                          else ConnectionError("payments API down"))
    report = await review(adk_store.url, reconcile=_hooks({keys["pay-1"]: answer}, []))
    assert sorted(entry.call_id for entry in report.calls) == ["mail-1", "pay-1"]
    assert report.settled_by_hooks == 0


@SQLITE
async def test_a_healed_call_its_hook_settles_is_not_listed(adk_store: Store) -> None:
    """After a repair without hooks healed the charge "may have run", a hook that finds it
    takes it off the list; the heal stays until someone resolves it."""
    keys = await _dead_store(adk_store)
    await repair(adk_store.url, ScanOptions(policy=HealPolicy(stale_after=60)))
    before = await review(adk_store.url)
    assert {(e.call_id, e.status) for e in before.calls} == {("pay-1", "healed"),
                                                             ("mail-1", "healed")}
    report = await review(adk_store.url, reconcile=_hooks(
        {keys["pay-1"]: settled(happened=False)}, []))
    assert [(e.call_id, e.status) for e in report.calls] == [("mail-1", "healed")]
    assert report.settled_by_hooks == 1


@SQLITE
@pytest.mark.parametrize(("answer", "expected"), [
    (settled({"receipt": "r-42"}), {"receipt": "r-42"}),
    (settled(happened=False), {"error": NOT_STARTED_ERROR, "outcome": "not_started",
                               "safe_to_retry": True}),
    (ConnectionError("payments API down"), effect_payload(ToolEffect.UNKNOWN,
                                                          CallOutcome.UNKNOWN)),
], ids=["found", "did_not_happen", "hook_failed"])
async def test_repair_heals_a_call_in_doubt_with_what_its_hook_settles(
        adk_store: Store, answer: Reconciliation | Exception, expected: dict[str, Any]) -> None:
    """repair asks the hook once per call in doubt, before it plans: the real result, not
    started, or (the hook failed) the heal it would write without one."""
    keys = await _dead_store(adk_store)
    asked: list[DoubtfulCall] = []
    policy = HealPolicy(stale_after=60, reconcile=_hooks({keys["pay-1"]: answer}, asked))
    report = await repair(adk_store.url, ScanOptions(policy=policy))
    assert report.healed == 1 and [c.call_id for c in asked] == ["pay-1"]
    charge = _heals(await _stored(adk_store))["pay-1"]
    assert {k: charge[k] for k in expected} == expected
    again = await repair(adk_store.url, ScanOptions(policy=policy))
    assert again.healed == 0 and len(asked) == 1  # nothing left in doubt: not asked


@SQLITE
async def test_scan_reports_the_outcome_a_hook_settles(adk_store: Store) -> None:
    """scan (read-only) asks too: the dead charge is reported with the settled outcome."""
    keys = await _dead_store(adk_store)
    policy = HealPolicy(stale_after=60, reconcile=_hooks(
        {keys["pay-1"]: settled({"receipt": "r-42"})}, []))
    report = await scan(adk_store.url, ScanOptions(policy=policy))
    outcomes = {call.call_id: call.run_outcome for call in report.dead_calls}
    assert outcomes == {"pay-1": CallOutcome.FINISHED_RESULT_LOST.value,
                        "mail-1": CallOutcome.UNKNOWN.value}


@pytest.fixture
def hooks_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module of reconcile hooks in the current folder, reading the "payment API" (a JSON
    file of receipts by idempotency key); yields its importable name."""
    name = f"shop_hooks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent('''
        import json
        import pathlib

        from adk_session_heal.policy import HealPolicy, settled

        RECEIPTS = pathlib.Path(__file__).with_name("receipts.json")


        async def charge_made(call):
            receipt = json.loads(RECEIPTS.read_text()).get(call.idempotency_key)
            return settled({"receipt": receipt}) if receipt else settled(happened=False)


        POLICY = HealPolicy(reconcile={"charge_card": charge_made}, reconcile_timeout=2)
        HOOKS = {"charge_card": charge_made}
        NOT_HOOKS = 42
    '''))
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


@SQLITE
async def test_the_cli_takes_hooks_by_module_and_name(adk_store: Store, hooks_module: str,
                                                      tmp_path: Path) -> None:
    """review, scan and repair --reconcile MODULE:NAME ask the hooks (a policy or a mapping)."""
    keys = await _dead_store(adk_store)
    (tmp_path / "receipts.json").write_text(json.dumps({keys["pay-1"]: "r-42"}))
    listed = cli("review", adk_store.url, "--json", "--reconcile", f"{hooks_module}:POLICY")
    assert listed.exit_code == 0, listed.output
    document = json.loads(listed.stdout)
    assert [c["call_id"] for c in document["calls"]] == ["mail-1"]
    assert document["settled_by_hooks"] == 1
    scanned = cli("scan", adk_store.url, "--json", "--older-than", "1m",
                  "--reconcile", f"{hooks_module}:HOOKS")
    assert scanned.exit_code == 1, scanned.output  # dead calls found
    outcomes = {c["call_id"]: c["run_outcome"] for c in json.loads(scanned.stdout)["dead_calls"]}
    assert outcomes["pay-1"] == "finished_result_lost"
    repaired = cli("repair", adk_store.url, "--yes", "--older-than", "1m",
                   "--reconcile", f"{hooks_module}:POLICY")
    assert repaired.exit_code == 0, repaired.output
    assert _heals(await _stored(adk_store))["pay-1"] == {"receipt": "r-42"}


@SQLITE
@pytest.mark.parametrize(("reference", "words"), [
    ("no_colon", ["give MODULE:NAME"]),
    ("no_such_module_here:HOOKS", ["no module named 'no_such_module_here'", "PYTHONPATH"]),
    ("{module}:MISSING", ["found nothing", "HealPolicy"]),
    ("{module}:NOT_HOOKS", ["found a int", "mapping of tool names"]),
    ("{broken}:HOOKS", ["raised RuntimeError", "--debug"]),
])
async def test_a_bad_reconcile_reference_is_one_line(
        adk_store: Store, hooks_module: str, tmp_path: Path, reference: str,
        words: list[str]) -> None:
    """No colon, no module, no name, the wrong kind of value, a module that raises: one line,
    exit 2, for each command that takes --reconcile, before anything is read."""
    broken = f"broken_{hooks_module}"
    (tmp_path / f"{broken}.py").write_text(
        "raise RuntimeError('no config at postgresql://shop:hunter2@db/pay')\n")
    ref = reference.format(module=hooks_module, broken=broken)
    try:
        for command in (["review"], ["scan"], ["repair", "--yes"]):
            result = cli(*command, adk_store.url, "--reconcile", ref)
            assert_one_line_error(result, "--reconcile", *words)
    finally:
        sys.modules.pop(broken, None)


@SQLITE
async def test_a_failing_hook_is_one_warning_line_and_the_call_stays_listed(
        adk_store: Store, hooks_module: str, tmp_path: Path) -> None:
    """A hook that raises: the run goes on (exit 0), stderr says which hook failed and why in
    one line, no traceback, and the call is listed for a person."""
    await _dead_store(adk_store)
    (tmp_path / "receipts.json").write_text("not json")
    listed = cli("review", adk_store.url, "--reconcile", f"{hooks_module}:HOOKS")
    assert listed.exit_code == 0, listed.output
    warnings = [line for line in listed.stderr.splitlines() if line.startswith("Warning:")]
    assert warnings == ["Warning: adk_session_heal: the reconcile hook of charge_card#pay-1 "
                        "raised JSONDecodeError; the call may have run"]
    assert "Traceback" not in listed.stderr
    assert "pay-1" in listed.stdout
