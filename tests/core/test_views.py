"""Tests for adk_session_heal.core.event_access: Event objects and stored JSON read alike."""

from __future__ import annotations

import json

from histories import OPS, build
from hypothesis import given, settings

from adk_session_heal.core.event_access import ADK_EVENTS, STORED_JSON
from adk_session_heal.core.findings import classify
from adk_session_heal.testing import History

NOW = 1_700_010_000.0


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_stored_json_classifies_like_events(ops: list) -> None:
    """Classifying the stored JSON of a history gives the same findings as its Events."""
    events = build(ops).events
    stored = [json.loads(e.model_dump_json(exclude_none=True)) for e in events]
    assert classify(stored, STORED_JSON, now=NOW, stale_after=5) == classify(
        events, now=NOW, stale_after=5
    )


def test_camel_case_json_reads_like_snake_case() -> None:
    """JSON served by ADK's HTTP API (camelCase aliases) reads the same as stored JSON."""
    h = History()
    h.user("q")
    h.call("f", long_running=True)
    h.rewind("inv-1")
    snake = [e.model_dump(mode="json", exclude_none=True) for e in h.events]
    camel = [e.model_dump(mode="json", exclude_none=True, by_alias=True) for e in h.events]
    assert STORED_JSON.steps(camel) == STORED_JSON.steps(snake) == ADK_EVENTS.steps(h.events)
    for s, c, e in zip(snake, camel, h.events, strict=True):
        assert STORED_JSON.long_running_ids(c) == STORED_JSON.long_running_ids(s)
        assert set(STORED_JSON.long_running_ids(s)) == set(ADK_EVENTS.long_running_ids(e))
        assert STORED_JSON.rewind_target(c) == ADK_EVENTS.rewind_target(e)
        assert STORED_JSON.invocation_id(c) == ADK_EVENTS.invocation_id(e)


def test_partial_events_do_not_count() -> None:
    """A streaming partial event contributes no call and no response."""
    h = History()
    h.user("q")
    h.call("f")
    h.events[-1].partial = True
    assert ADK_EVENTS.steps(h.events)[0][1] == ((), ())
