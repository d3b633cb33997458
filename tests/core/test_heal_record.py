"""HealRecord's one encoding: every ledger, document and log form is derived from it."""

from __future__ import annotations

import json
from types import SimpleNamespace

from adk_session_heal.core.heal_record import HealRecord, HealTrigger
from adk_session_heal.ops.ledger_documents import record_json
from adk_session_heal.store.ledger.heal_table import ledger_row, record_from_row

RECORD = HealRecord("app", "user", "s1", "call-1", "call-1-heal", "inv-1", ("c1", "c2"),
                    ("charge", "ship"), "stale", HealTrigger.REPAIR, 1_700_000_000.5,
                    effects=("side_effect", "unknown"), outcomes=("may_have_run", "unknown"),
                    run_id="run-1")


def test_to_json_reads_back_as_the_same_record() -> None:
    """from_json(to_json(r)) is r, run id included; the JSON survives a json round trip."""
    data = json.loads(json.dumps(RECORD.to_json()))
    back = HealRecord.from_json(data)
    assert back == RECORD and back.run_id == "run-1"


def test_a_ledger_row_reads_back_through_the_same_codec() -> None:
    """SQL rows (no effect columns) and Redis hashes (with them) decode to the record."""
    sql = record_from_row(SimpleNamespace(**ledger_row(RECORD), id=7, event_digest=None))
    assert sql.call_ids == RECORD.call_ids and sql.effects == () and sql.run_id == "run-1"
    redis = record_from_row(SimpleNamespace(**ledger_row(RECORD, with_effects=True)))
    assert redis == RECORD


def test_the_history_record_is_a_view_of_to_json() -> None:
    """The history document carries to_json's values under the same keys."""
    data = RECORD.to_json()
    view = record_json(RECORD)
    shared = set(view) - {"effects", "outcomes"}
    assert {k: view[k] for k in shared} == {k: data[k] for k in shared}
    assert "healed_at" not in record_json(RECORD, with_trigger=False)
