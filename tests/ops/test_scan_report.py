"""The reports, pure: scan and repair records, TSV columns, the repair's summary line,
and the reports' short reprs."""

from __future__ import annotations

import pytest
from stores import crashed_histories

from adk_session_heal.core.event_access import ADK_EVENTS
from adk_session_heal.core.findings import classify
from adk_session_heal.core.heal_record import HealRecord, HealTrigger
from adk_session_heal.core.healing import plan_session
from adk_session_heal.core.review import ReviewEntry
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.ops.operator_review import ReviewReport
from adk_session_heal.ops.repair_report import HealEntry, RepairReport
from adk_session_heal.ops.scan import RepairPlan
from adk_session_heal.ops.scan_report import (
    CallEntry,
    DamagedEntry,
    ResponseEntry,
    ScanReport,
    SupersededEntry,
)
from adk_session_heal.ops.text_output import REPAIR_COLUMNS, SCAN_COLUMNS, tsv_lines
from adk_session_heal.policy import HealPolicy
from adk_session_heal.store.base import WriteOutcome
from adk_session_heal.store.urls import parse_store_url

NOW = 1_700_000_000.0


def _call(status: str, pending_reason: str | None = None) -> CallEntry:
    """A call entry of session s, an hour old."""
    return CallEntry("app", "user", "s", "e1", "c1", "tool", "inv", NOW - 3600, status,
                     pending_reason)


def _report() -> ScanReport:
    """A report holding one entry of each list."""
    report = ScanReport("sqlite:///x.db", "database", NOW, 86400.0, clock_skew=300.0)
    report.dead_calls.append(_call("superseded"))
    report.in_flight_calls.append(_call("in_flight"))
    report.pending_calls.append(_call("pending", "long_running"))
    report.id_less_calls.append(_call("id_less"))
    report.orphaned_responses.append(ResponseEntry("app", "user", "s", "e2", "c9", "tool"))
    report.damaged_rows.append(DamagedEntry("app", "user", "t", None, "not JSON"))
    report.damaged_sessions = 1
    report.superseded_heals.append(SupersededEntry("app", "user", "u", "e1-heal", "e1", ("c1",),
                                                   ("tool",), ("e7",)))
    return report


def test_every_record_key_has_a_column() -> None:
    """Every key of every scan record is a TSV column, so no field is lost; kind comes first."""
    report = _report()
    records = list(report.records())
    assert [r["kind"] for r in records] == ["dead_call", "in_flight_call", "pending_call",
                                            "id_less_call", "orphaned_response", "damaged_row",
                                            "superseded_heal"]
    assert {key for r in records for key in r} == set(SCAN_COLUMNS)
    assert SCAN_COLUMNS[0] == "kind"
    # repair's columns hold every scan column; columns added later (the tool-run ledger's,
    # then the superseded heals') go at the end of each, so no existing column moves.
    assert set(SCAN_COLUMNS) <= set(REPAIR_COLUMNS)
    first = SCAN_COLUMNS.index("run_outcome")
    assert REPAIR_COLUMNS[:first] == SCAN_COLUMNS[:first]
    assert SCAN_COLUMNS[first:first + 2] == REPAIR_COLUMNS[-3:-1] == (
        "run_outcome", "lease_holder")
    assert SCAN_COLUMNS[-1] == REPAIR_COLUMNS[-1] == "response_event_ids"
    header, *lines = tsv_lines(records, SCAN_COLUMNS)
    assert header.split("\t") == list(SCAN_COLUMNS) and len(lines) == len(records)
    with pytest.raises(ValueError, match="no TSV column"):
        list(tsv_lines([{"kind": "x", "surprise": 1}], SCAN_COLUMNS))


def test_records_are_the_json_lists_entries() -> None:
    """The line records are the JSON document's list entries, plus their kind."""
    report = _report()
    document = report.to_json()
    by_kind = {r["kind"]: {k: v for k, v in r.items() if k != "kind"} for r in report.records()}
    assert by_kind["in_flight_call"] == document["in_flight_calls"][0]
    assert by_kind["damaged_row"] == document["damaged_rows"][0]
    assert document["version"] == 1 and document["counts"]["in_flight_calls"] == 1
    assert "in_flight_calls" not in report.summary_json()
    assert "1 in flight, 1 pending" in report.summary_line()


def _many_heals(count: int) -> RepairReport:
    """A written repair of ``count`` heals (one record each), over :func:`_report`'s scan."""
    record = HealRecord("app", "user", "s", "e1", "e1-heal", "inv", ("c1",), ("tool",),
                        "superseded", HealTrigger.REPAIR, NOW)
    entries = [HealEntry(record, {"id": "e1-heal", "content": {"parts": [{"text": "x" * 100}]}},
                         True, WriteOutcome.WRITTEN)] * count
    return RepairReport(_report(), entries, dry_run=False, ledger=True)


@pytest.mark.parametrize(("changed", "deleted", "said"), [
    (1, 0, "1 skipped: their session changed since the scan"),
    (0, 3, "3 skipped: their session was deleted since the scan"),
    (1, 2, "3 skipped: their session changed (1) or was deleted (2) since the scan"),
])
def test_repair_summary_says_which_skipped_sessions_were_deleted(
    changed: int, deleted: int, said: str
) -> None:
    """The summary line and the JSON count the heals skipped because their session was
    deleted apart from those whose session changed."""
    report = _many_heals(2)
    record = report.heals[0].record
    report.heals += [HealEntry(record, {}, False, WriteOutcome.CHANGED)] * changed
    report.heals += [HealEntry(record, {}, False, WriteOutcome.GONE)] * deleted
    assert f"(0 already present, {said}" in report.summary_line()
    document = report.to_json()
    assert (document["healed"], document["skipped"], document["deleted"]) == (
        2, changed + deleted, deleted)


def test_scan_report_repr_is_one_short_line_of_counts() -> None:
    """A scan report's repr is its counts on one short line, never its entries."""
    report = _report()
    report.dead_calls.extend(_call("superseded") for _ in range(10_000))
    text = repr(report)
    assert "\n" not in text and len(text) < 400
    assert "dead_calls=10001" in text and "damaged_rows=1" in text and "CallEntry" not in text
    assert text.startswith("ScanReport(url='sqlite:///x.db', layout='database'")


def test_repair_report_repr_is_one_short_line_of_counts() -> None:
    """A repair report's repr is its counts and its scan's, never its heals' events."""
    text = repr(_many_heals(10_000))
    assert "\n" not in text and len(text) < 600
    assert "healed=10000" in text and "planned=10000" in text and "dead_calls=1" in text
    assert "HealEntry" not in text and "xxxx" not in text


def test_repair_plan_repr_is_one_short_line_of_counts() -> None:
    """A repair plan's repr is its store (password hidden) and counts, never its heals."""
    history = crashed_histories()["dead"]
    key = SessionKey("app", "user", "dead")
    findings = classify(history.events, ADK_EVENTS, now=NOW + 86_400)
    planned = plan_session(history.events, findings, key, HealPolicy(),
                           trigger=HealTrigger.REPAIR, healed_at=NOW, seen_events=None)
    assert planned is not None
    url = parse_store_url("postgresql+asyncpg://app:secret@db/sessions")
    plan = RepairPlan(url, _report(), (planned,) * 5_000, NOW)
    assert repr(plan) == f"RepairPlan(url={str(url)!r}, sessions=5000, heals=5000)"
    assert "secret" not in repr(plan)


def test_review_report_repr_is_one_short_line_of_counts() -> None:
    """A review report's repr is its store and counts, never its calls."""
    entry = ReviewEntry(SessionKey("app", "user", "s"), "e1", "c1", "tool", '{"q": 1}', NOW,
                        "healed", "side_effect", "may_have_run", "e1-heal", "inv-1")
    report = ReviewReport("sqlite:///x.db", NOW, [entry] * 10_000, damaged_sessions=2)
    assert repr(report) == "ReviewReport(url='sqlite:///x.db', calls=10000, damaged_sessions=2)"
