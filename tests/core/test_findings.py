"""Tests for adk_session_heal.core.findings: what became of every call."""

from __future__ import annotations

from adk_session_heal.core.findings import CallStatus, PendingReason, classify
from adk_session_heal.core.healing import build_heal_event, plan_heals
from adk_session_heal.policy import HealPolicy
from adk_session_heal.testing import History

NOW = 1_700_001_000.0
KEY = {"app_name": "app", "user_id": "u", "session_id": "s"}


def statuses(history: History, **kwargs: float) -> list[tuple[str | None, CallStatus]]:
    findings = classify(history.events, now=kwargs.pop("now", NOW), **kwargs)
    return [(c.call_id, c.status) for c in findings.calls]


def test_answered_call() -> None:
    """A call with its response is answered and nothing needs healing."""
    h = History()
    h.user("q")
    call = h.call("f")
    h.respond((call, "f"))
    findings = classify(h.events, now=NOW)
    assert [(c.call_id, c.status) for c in findings.calls] == [(call, CallStatus.ANSWERED)]
    assert not findings.needs_healing
    assert findings.dead == ()


def test_call_followed_by_a_new_invocation_is_superseded() -> None:
    """An unanswered call is dead once a later event belongs to another invocation."""
    h = History()
    h.user("q")
    call = h.call("f")
    h.user("hello?")
    assert statuses(h) == [(call, CallStatus.SUPERSEDED)]


def test_unanswered_call_in_newest_invocation_is_in_flight() -> None:
    """A call of the newest invocation may still be running: in flight, never dead."""
    h = History()
    h.user("q")
    call = h.call("f")
    h.text("thinking")
    assert statuses(h) == [(call, CallStatus.IN_FLIGHT)]


def test_stale_only_past_the_given_age() -> None:
    """stale_after turns an old newest-invocation call stale; a young one stays in flight."""
    h = History(start=NOW - 100)
    h.user("q")
    call = h.call("f")  # at NOW - 99
    assert statuses(h, stale_after=50) == [(call, CallStatus.STALE)]
    assert statuses(h, stale_after=500) == [(call, CallStatus.IN_FLIGHT)]


def test_long_running_and_client_calls_are_pending() -> None:
    """Long-running calls and ADK's adk_request_* calls are pending, even when superseded."""
    h = History()
    h.user("q")
    lr = h.call("approve", long_running=True)
    client = h.call("adk_request_confirmation", call_id="adk-1")
    h.user("next")
    findings = classify(h.events, now=NOW)
    assert [(c.call_id, c.status, c.pending_reason) for c in findings.calls] == [
        (lr, CallStatus.PENDING, PendingReason.LONG_RUNNING),
        ("adk-1", CallStatus.PENDING, PendingReason.CLIENT_CALL),
    ]
    assert not findings.needs_healing
    assert client == "adk-1"


def test_tool_awaiting_confirmation_is_pending() -> None:
    """A call answered only by ADK's confirmation placeholder is pending, not answered."""
    h = History()
    h.user("q")
    call = h.call("transfer")
    h.respond((call, "transfer"), pending=True)
    h.user("next")
    assert statuses(h) == [(call, CallStatus.PENDING)]


def test_idless_call_is_reported_not_healed() -> None:
    """A call without an id cannot be paired reliably: id_less, never dead."""
    h = History()
    h.user("q")
    h.calls("f", ids=[None])
    h.user("next")
    findings = classify(h.events, now=NOW)
    assert [(c.call_id, c.status) for c in findings.calls] == [(None, CallStatus.ID_LESS)]
    assert not findings.needs_healing


def test_orphaned_and_duplicate_responses_are_reported() -> None:
    """A response with no call is orphaned; a second answer to one call is a duplicate."""
    h = History()
    h.user("q")
    h.respond(("ghost", "f"))
    call = h.call("g")
    h.respond((call, "g"))
    h.respond((call, "g"))
    findings = classify(h.events, now=NOW)
    assert [(r.event_id, r.call_id) for r in findings.orphaned_responses] == [("e-0002", "ghost")]
    assert [(r.event_id, r.call_id) for r in findings.duplicate_responses] == [("e-0005", call)]


def test_long_running_progress_updates_are_not_duplicates() -> None:
    """Several responses to a long-running call are progress, not duplicates."""
    h = History()
    h.user("q")
    call = h.call("job", long_running=True)
    h.respond((call, "job"))
    h.respond((call, "job"))
    assert classify(h.events, now=NOW).duplicate_responses == ()


def test_rewound_call_is_reported_not_healed() -> None:
    """A call inside a rewound stretch is never shown to a model: rewound, never dead."""
    h = History()
    h.user("q1")
    h.user("q2")
    call = h.call("f")
    h.rewind("inv-2")
    h.user("again")
    findings = classify(h.events, now=NOW)
    assert [(c.call_id, c.status) for c in findings.calls] == [(call, CallStatus.REWOUND)]
    assert not findings.needs_healing


def test_call_before_rewound_stretch_is_still_superseded() -> None:
    """A dead call before the rewound invocation stays dead."""
    h = History()
    h.user("q1")
    call = h.call("f")
    h.user("q2")
    h.rewind("inv-2")
    assert statuses(h) == [(call, CallStatus.SUPERSEDED)]


def test_compaction_event_does_not_supersede() -> None:
    """A compaction summary is not a new invocation: the call before it stays in flight."""
    h = History()
    h.user("q")
    call = h.call("f")
    h.invocation_id = ""
    h.compaction()
    assert statuses(h) == [(call, CallStatus.IN_FLIGHT)]


def test_reused_id_second_occurrence_is_dead() -> None:
    """When a model reuses an id, the unanswered later occurrence is found dead."""
    h = History()
    h.user("q")
    h.call("f", call_id="dup")
    h.respond(("dup", "f"))
    h.call("f", call_id="dup")
    h.user("next")
    assert statuses(h) == [("dup", CallStatus.ANSWERED), ("dup", CallStatus.SUPERSEDED)]


def test_resumed_older_invocation_supersedes_the_one_between() -> None:
    """Interleaved invocations: a call is dead once any later event is of another invocation."""
    h = History()
    h.user("q1")
    first = h.call("f")
    h.user("q2")
    second = h.call("g")
    h.user("resume", invocation_id="inv-1")
    assert statuses(h) == [(first, CallStatus.SUPERSEDED), (second, CallStatus.SUPERSEDED)]


def test_synthetic_answer_is_flagged() -> None:
    """A call whose counting response carries the heal marker is answered_by_heal."""
    from adk_session_heal.core.healing import apply_heals, build_heal_event, plan_heals
    from adk_session_heal.policy import HealPolicy

    h = History()
    h.user("q")
    h.call("f")
    h.user("next")
    plans = plan_heals(h.events, classify(h.events, now=NOW), app_name="a", user_id="u",
                       session_id="s")
    healed = apply_heals(h.events, [(p.insert_at, build_heal_event(p, HealPolicy(), healed_at=NOW))
                                    for p in plans])
    (finding,) = classify(healed, now=NOW).calls
    assert finding.status is CallStatus.ANSWERED and finding.answered_by_heal


def test_session_without_calls_has_no_findings() -> None:
    """A chat without tools has nothing to report."""
    h = History()
    h.user("q")
    h.text("a")
    findings = classify(h.events, now=NOW)
    assert findings.calls == () and findings.orphaned_responses == ()


# -- differential test against ADK's own reasoning ------------------------------

from google.adk.apps.compaction import _provably_dead_call_ids  # noqa: E402
from histories import OPS, build  # noqa: E402
from hypothesis import given, settings  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_superseded_matches_adk_provably_dead_call_ids(ops: list) -> None:
    """On generated histories our superseded ids are ADK compaction's dead ids.

    ADK's `_provably_dead_call_ids` also counts as dead what we keep `pending`: a
    tool call whose confirmation request an older invocation abandoned. We never
    heal those by default; nor the dead calls a heal would make worse
    (`malformed`, `out_of_turn`). Those are the only allowed difference.
    """
    events = build(ops).events
    newest = next(
        (e.invocation_id for e in reversed(events) if e.invocation_id and not e.actions.compaction),
        None,
    )
    adk_dead = _provably_dead_call_ids(events, all_events=events, newest_invocation_id=newest)
    findings = classify(events, now=NOW)
    ours = {c.call_id for c in findings.calls if c.status is CallStatus.SUPERSEDED}
    kept = {c.call_id for c in findings.calls if c.status in (
        CallStatus.PENDING, CallStatus.MALFORMED, CallStatus.OUT_OF_TURN)}
    assert ours <= adk_dead
    assert adk_dead - ours <= kept


def test_a_heal_stored_after_later_turns_does_not_supersede_the_newest_invocation() -> None:
    """An appended heal carries an older invocation: the newest one's live call stays in flight."""
    h = History(start=NOW - 100)
    h.user("first")
    h.calls("a", "b")
    h.user("second")
    live = h.call("c")
    h.calls("slow", long_running=True)
    (plan,) = plan_heals(h.events[:3], classify(h.events[:3], now=NOW), **KEY)
    appended = [*h.events, build_heal_event(plan, HealPolicy(), healed_at=NOW)]
    by_id = {c.call_id: c.status for c in classify(appended, now=NOW).calls}
    assert by_id[live] is CallStatus.IN_FLIGHT
    assert {by_id[i] for i in plan.call_ids} == {CallStatus.ANSWERED}
    assert CallStatus.SUPERSEDED not in by_id.values()


from ugly_histories import UGLY_OPS, build_ugly  # noqa: E402

from adk_session_heal.core.event_access import ADK_EVENTS, STORED_JSON  # noqa: E402
from adk_session_heal.core.findings import all_answered  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(UGLY_OPS)
def test_all_answered_is_classifys_all_answered(ops: list) -> None:
    """all_answered gives classify's answer on ugly histories, as Events and as stored JSON,
    rewinds included."""
    events = build_ugly(ops, start=1_700_000_000.0)
    history = History(start=1_700_000_000.0)
    history.user("again")
    history.rewind("inv-1")
    for held in (events, [*events, *history.events]):
        stored = [e.model_dump(exclude_none=True, mode="json") for e in held]
        for access, read in ((ADK_EVENTS, held), (STORED_JSON, stored)):
            expected = classify(read, access, now=NOW).all_answered  # type: ignore[arg-type]
            assert all_answered(read, access) is expected  # type: ignore[arg-type]
