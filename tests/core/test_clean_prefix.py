"""clean_prefix: reading on from a remembered clean prefix finds what reading everything finds."""

from __future__ import annotations

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from hypothesis import given, settings
from hypothesis import strategies as st
from ugly_histories import UGLY_OPS, Op, build_ugly

from adk_session_heal.core.clean_prefix import CleanPrefix, clean_prefix
from adk_session_heal.core.event_access import ADK_EVENTS
from adk_session_heal.core.findings import CallStatus, classify
from adk_session_heal.testing import History

START = 1_700_000_000.0
LATER = START + 10 * 365 * 86_400.0


def clean_turns(turns: int, parallel: int, separate: bool) -> list[Event]:
    """Healthy turns: a question, ``parallel`` calls, their answers (together or one by one)."""
    history = History(start=START)
    for turn in range(turns):
        history.user(f"question {turn}")
        ids = history.calls(*["lookup"] * parallel, ids=[f"t{turn}-c{i}" for i in range(parallel)])
        answers = [(call_id, "lookup", {"n": i}) for i, call_id in enumerate(ids)]
        if separate:
            for answer in answers:
                history.respond(answer)
        else:
            history.respond(*answers)
        history.text("done")
    return list(history.events)


def rewind() -> Event:
    """An ADK rewind event (no content; annuls the invocation it names and what follows)."""
    return Event(invocation_id="inv-rewind", author="user", timestamp=LATER,
                 actions=EventActions(rewind_before_invocation_id="inv-1"))


@settings(max_examples=300)
@given(turns=st.integers(0, 4), parallel=st.integers(1, 3), separate=st.booleans(),
       ops=st.one_of(st.just([]), UGLY_OPS), split=st.floats(0, 1), rewound=st.booleans())
def test_reading_on_from_a_prefix_finds_what_a_whole_read_finds(
    turns: int, parallel: int, separate: bool, ops: list[Op], split: float, rewound: bool
) -> None:
    """Clean turns then ugly ones (reused ids, ties, orphans, ...): read at once, or first a
    prefix then the rest, the answer is the same; and a clean session has nothing to heal."""
    events = clean_turns(turns, parallel, separate) + build_ugly(ops, start=START + 5_000)
    if rewound:
        events.append(rewind())
    whole = clean_prefix(events, ADK_EVENTS)
    known = clean_prefix(events[:int(split * len(events))], ADK_EVENTS)
    assert clean_prefix(events, ADK_EVENTS, known) == whole
    if whole is not None:
        findings = classify(events, now=LATER, stale_after=0.0)
        assert not findings.needs_healing
        assert not findings.orphaned_responses and not findings.duplicate_responses
        assert {c.status for c in findings.calls} <= {CallStatus.ANSWERED, CallStatus.PENDING}
        assert whole.count == len(events)


def test_a_session_read_again_unchanged_is_not_read() -> None:
    """A second read of the same events returns the remembered prefix itself."""
    events = clean_turns(3, 2, separate=True)
    known = clean_prefix(events, ADK_EVENTS)
    assert isinstance(known, CleanPrefix) and known.count == len(events)
    assert clean_prefix(list(events), ADK_EVENTS, known) is known


def test_a_dead_call_after_a_clean_prefix_is_found() -> None:
    """Events appended after the prefix are read: a call left unanswered makes it unclean."""
    history = History(start=START)
    history.user("weather?")
    call = history.call("get_weather")
    history.respond((call, "get_weather", {"temp": 20}))
    known = clean_prefix(history.events, ADK_EVENTS)
    assert known is not None
    history.user("and tomorrow?")
    history.call("get_weather")
    history.user("hello?")
    assert clean_prefix(history.events, ADK_EVENTS, known) is None
    assert classify(history.events, now=LATER).needs_healing


def test_a_call_id_reused_after_the_prefix_is_not_clean() -> None:
    """A call reusing an id the prefix called is read as a whole read would read it."""
    history = History(start=START)
    history.user("weather?")
    history.call("get_weather", call_id="c1")
    history.respond(("c1", "get_weather", {"temp": 20}))
    known = clean_prefix(history.events, ADK_EVENTS)
    history.call("get_weather", call_id="c1")
    history.respond(("c1", "get_weather", {"temp": 21}))
    assert clean_prefix(history.events, ADK_EVENTS) is None
    assert clean_prefix(history.events, ADK_EVENTS, known) is None


def test_a_prefix_that_no_longer_starts_the_events_is_not_trusted() -> None:
    """An event inserted or removed inside the prefix, or another session under the same id
    with other events, makes the whole session be read."""
    events = clean_turns(2, 2, separate=False)
    known = clean_prefix(events, ADK_EVENTS)
    assert known is not None
    dead = History(start=START + 1)
    dead.call("charge_card", call_id="lost")
    inserted = [*events[:2], *dead.events, *events[2:]]
    assert clean_prefix(inserted, ADK_EVENTS, known) is None
    removed = [events[0], *events[2:]]  # the first answer removed: its call is open
    assert clean_prefix(removed, ADK_EVENTS, known) is None
    same_ids = History(start=START + 60)  # the same sequential ids, other events
    same_ids.user("q")
    same_ids.call("other", call_id="x")
    same_ids.text("no answer")
    while len(same_ids.events) < len(events):
        same_ids.text("filler")
    assert [e.id for e in same_ids.events][::len(events) - 1] == [e.id for e in events][
        ::len(events) - 1]
    assert clean_prefix(same_ids.events, ADK_EVENTS, known) is None


def test_a_rewind_after_the_prefix_makes_it_read_whole() -> None:
    """A rewind appended after a clean prefix is not clean (it may annul the prefix's events)."""
    events = clean_turns(2, 1, separate=False)
    known = clean_prefix(events, ADK_EVENTS)
    assert clean_prefix([*events, rewind()], ADK_EVENTS, known) is None


def test_empty_and_id_less_sessions_are_not_remembered() -> None:
    """Nothing to recognise the session by: no prefix (the caller classifies it whole)."""
    assert clean_prefix([], ADK_EVENTS) is None
    events = clean_turns(1, 1, separate=False)
    events[-1] = events[-1].model_copy(update={"id": ""})
    assert clean_prefix(events, ADK_EVENTS) is None
