"""Tests for adk_session_heal.core.pairing: ADK's call/response attribution rule."""

from __future__ import annotations

from typing import Literal

from hypothesis import given
from hypothesis import strategies as st

from adk_session_heal.core.pairing import (
    EMPTY_STEP,
    OrphanedResponse,
    Step,
    answered_once,
    pair,
    repeated_ids,
    response_owners,
)


def test_response_answers_the_call_before_it() -> None:
    """A response is attributed to the preceding call with the same id."""
    result = pair([([("a", "f")], ()), ((), [("a", "f")])])
    assert [(o.step, o.id, o.responses) for o in result.occurrences] == [(0, "a", [1])]
    assert result.orphans == ()


def test_reused_id_response_goes_to_newest_preceding_call() -> None:
    """With a reused id, each response belongs to the newest call before it."""
    steps = [
        ([("a", "f")], ()),
        ((), [("a", "f")]),
        ([("a", "f")], ()),
    ]
    result = pair(steps)
    assert [o.responses for o in result.occurrences] == [[1], []]
    assert [o.step for o in result.unanswered] == [2]


def test_response_before_any_call_is_orphaned() -> None:
    """A response with no earlier call of its id is an orphan, even if a call follows."""
    result = pair([((), [("a", "f")]), ([("a", "f")], ())])
    assert result.orphans == (OrphanedResponse(0, "a", "f"),)
    assert result.occurrences[0].responses == []


def test_step_never_answers_its_own_calls() -> None:
    """Within one step, responses are applied before calls."""
    result = pair([([("a", "f")], [("a", "f")])])
    assert result.orphans == (OrphanedResponse(0, "a", "f"),)
    assert result.occurrences[0].responses == []


def test_idless_response_pairs_by_name_with_idless_call() -> None:
    """An id-less response pairs with the newest preceding id-less call of its name."""
    steps = [([(None, "f"), (None, "g")], ()), ((), [(None, "g")]), ((), [(None, "h")])]
    result = pair(steps)
    assert [(o.name, o.responses) for o in result.occurrences] == [("f", []), ("g", [1])]
    assert result.orphans == (OrphanedResponse(2, None, "h"),)


def test_parallel_calls_and_progress_updates() -> None:
    """Parallel calls pair independently; repeated responses all attach to their call."""
    steps = [
        ([("a", "f"), ("b", "g")], ()),
        EMPTY_STEP,
        ((), [("b", "g")]),
        ((), [("a", "f"), ("b", "g")]),
    ]
    result = pair(steps)
    assert [(o.id, o.position, o.responses) for o in result.occurrences] == [
        ("a", 0, [3]),
        ("b", 1, [2, 3]),
    ]


# Few ids and names on purpose: reuse across steps, ids shared by parallel calls,
# id-less calls of one tool, responses and calls in one step, empty names.
_ref = st.tuples(st.sampled_from([None, "a", "b", "c"]), st.sampled_from(["", "f", "g"]))
_steps = st.lists(st.one_of(
    st.just(EMPTY_STEP),
    st.tuples(st.lists(_ref, max_size=3), st.lists(_ref, max_size=3))), max_size=30)


@given(_steps, st.sampled_from(["newest", "positional"]))
def test_response_owners_is_pair_at_step_level(
        steps: list[Step], idless: Literal["newest", "positional"]) -> None:
    """response_owners gives, per attributed response, the step pair() attributes it to."""
    result = pair(steps, idless=idless)
    expected = sorted((o.step, r) for o in result.occurrences for r in o.responses)
    assert sorted(response_owners(steps)) == expected


def test_response_owners_skips_orphans_and_keeps_history_order() -> None:
    """Orphans are left out; owners come in the order of their responses."""
    steps: list[Step] = [((), [("x", "f")]), ([("a", "f")], ()), ([(None, "g")], [("a", "f")]),
                         EMPTY_STEP, ((), [(None, "g"), ("a", "f")])]
    assert response_owners(steps) == [(1, 2), (2, 4), (1, 4)]


@st.composite
def _healthy_steps(draw: st.DrawFn) -> list[Step]:
    """A history whose calls (parallel ones too) are each answered once, later, by id."""
    steps: list[Step] = []
    waiting: list[str] = []
    for number in range(draw(st.integers(0, 12))):
        answered = draw(st.integers(0, len(waiting)))
        responses, waiting = [(i, "f") for i in waiting[:answered]], waiting[answered:]
        calls = [(f"c{number}-{k}", "f") for k in range(draw(st.integers(0, 3)))]
        waiting += [call_id for call_id, _ in calls]
        steps.append((calls, responses) if calls or responses else EMPTY_STEP)
    steps.append(((), [(i, "f") for i in waiting]))
    return steps


@given(_steps)
def test_answered_once_promises_what_pair_finds(steps: list[Step]) -> None:
    """When answered_once holds, pair() finds one response per call and no orphan."""
    if answered_once(steps):
        result = pair(steps)
        assert not result.orphans
        assert all(o.id and len(o.responses) == 1 for o in result.occurrences)


@given(_healthy_steps())
def test_answered_once_holds_on_healthy_histories(steps: list[Step]) -> None:
    """A history of calls each answered once, later and by id, is recognised as such."""
    assert answered_once(steps)
    result = pair(steps)
    assert not result.orphans and all(len(o.responses) == 1 for o in result.occurrences)


def test_answered_once_fails_at_every_other_shape() -> None:
    """Unanswered, answered twice, orphaned, id-less, reused id and same-step answers fail it."""
    call, answer = ([("a", "f")], ()), ((), [("a", "f")])
    assert answered_once([call, answer]) and answered_once([])
    assert not answered_once([call])
    assert not answered_once([call, answer, answer])
    assert not answered_once([answer, call])
    assert not answered_once([([(None, "f")], ()), ((), [(None, "f")])])
    assert not answered_once([call, answer, call, answer])
    assert not answered_once([([("a", "f")], [("a", "f")])])


def test_repeated_ids_names_the_ids_two_calls_of_one_step_carry() -> None:
    """Only ids carried twice within the step count; id-less calls never do."""
    assert repeated_ids([("x", "a"), ("y", "b"), ("x", "c"), (None, "d"), (None, "d")]) == {"x"}
    assert repeated_ids([("x", "a")]) == frozenset()
    assert repeated_ids([("x", "a"), ("y", "a")]) == frozenset()
