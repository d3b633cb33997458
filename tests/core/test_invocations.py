"""Tests for adk_session_heal.core.invocations: rewinds and the newest invocation's tail."""

from __future__ import annotations

from adk_session_heal.core.event_access import ADK_EVENTS, STORED_JSON
from adk_session_heal.core.invocations import live_mask, supersession_boundary
from adk_session_heal.testing import History


def test_no_rewind_means_no_mask() -> None:
    """Without a rewind every event is live, and no mask is built."""
    history = History()
    history.user("hi")
    assert live_mask(history.events, ADK_EVENTS, []) is None


def test_a_rewind_annuls_back_to_its_target_invocation() -> None:
    """The rewind event and everything from its target's first event are annulled."""
    history = History()
    history.user("one")                      # e-0001 inv-1
    history.user("two")                      # e-0002 inv-2
    history.call("get_weather")              # e-0003 inv-2
    history.rewind("inv-2")                  # e-0004 inv-3
    history.user("three")                    # e-0005 inv-4
    assert live_mask(history.events, ADK_EVENTS, [3]) == [True, False, False, False, True]


def test_boundary_is_where_the_newest_invocations_tail_starts() -> None:
    """The tail starts after the last event of another invocation; both readers agree."""
    history = History()
    history.user("one")                      # inv-1
    history.call("get_weather")              # inv-1
    history.user("two")                      # inv-2
    history.text("hello")                    # inv-2
    expected = ("inv-2", 2, 3)
    assert supersession_boundary(history.events, ADK_EVENTS) == expected
    stored = [e.model_dump(exclude_none=True, mode="json") for e in history.events]
    assert supersession_boundary(stored, STORED_JSON) == expected


def test_a_single_invocation_has_its_tail_from_the_start() -> None:
    """With one invocation nothing is superseded: the tail starts at 0."""
    history = History()
    history.user("one")
    history.call("get_weather")
    assert supersession_boundary(history.events, ADK_EVENTS) == ("inv-1", 0, 1)
