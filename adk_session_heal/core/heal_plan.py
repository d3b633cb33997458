"""Planning heals: which call events get one, with what id, at what time.

The pure half of healing that decides, from the classified events alone:

* **id**: derived from the call event, ``"<call event id>-heal"``, so two
  healers in two processes produce the same primary key and storage keeps one.
  The suffix makes the id sort right after its call when timestamps tie. An id
  that would not fit ADK's 128-character key column becomes a UUID5 of the
  session and the call event instead.
* **placement**: right after the call event, except where more model events
  (a text reply, more calls) follow it and then a real answer to a call of
  that model turn (calls c1 and c2, a text, c1's answer): there the heal goes
  after those model events and before the answer, because Anthropic merges
  them into the call's turn, and a heal in between would leave c1's answer a
  turn too late (see :func:`_anchor`). Heals of two call events may share a
  place. The event the heal follows is its
  *anchor*. The timestamp is always strictly after the call's and the
  anchor's (at least one microsecond, the resolution of ADK's SQL columns),
  so every reader that orders by time reads them first, whatever the clocks
  did. It is also strictly before the event stored after the anchor (1 ms
  after, or half-way when they are closer) whenever there is room, that is
  when the two are at least 2 µs apart; when they tie or are 1 µs apart the
  heal goes 1 µs after the anchor, which may tie with or follow that next
  event (it cannot be moved without rewriting rows, which is never done).
* **author, branch, invocation, isolation scope, node path**: copied from the
  call event.

:mod:`~adk_session_heal.core.healing` builds what each plan writes. No I/O.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..policy import DeadCall
from .event_access import ADK_EVENTS, EventAccess
from .findings import HEALABLE, SessionFindings
from .pairing import Step

E = TypeVar("E")

HEAL_ID_SUFFIX = "-heal"
"""Suffix of a synthetic event's id after its call event's id."""

_MAX_ID_LENGTH = 128  # ADK's DEFAULT_MAX_KEY_LENGTH for the events.id column.
_NAMESPACE = uuid.UUID("5b0f7d3e-4c1a-5e9b-9d6f-2a8c4e1b7f30")
_DEFAULT_GAP_US = 1_000


@dataclass(frozen=True, slots=True)
class HealPlan:
    """What one heal will write: the answer to one call event's dead calls.

    Attributes:
        call_event_id: Id of the event holding the dead calls.
        call_event_index: Its position in the planned list.
        insert_at: Where the synthetic event goes in that list (right after
            its anchor).
        event_id: The synthetic event's deterministic id.
        timestamp: The synthetic event's time (POSIX seconds, whole
            microseconds), strictly after the call and the anchor, and
            before the event after the anchor when there is room.
        anchor_event_id: Id of the event the heal goes right after: the call
            event, or the text reply a sibling's answer follows (see the
            module docstring).
        anchor_timestamp: The anchor's own time, as read (a writer places the
            heal's stored time relative to the anchor row's).
        invocation_id: Copied from the call event.
        author: Copied from the call event.
        branch: Copied from the call event.
        isolation_scope: Copied from the call event.
        node_path: Copied from the call event.
        reason: ``"superseded"``, ``"stale"`` or ``"abandoned"``.
        calls: The dead calls answered, in part order.
    """

    call_event_id: str
    call_event_index: int
    insert_at: int
    event_id: str
    timestamp: float
    anchor_event_id: str
    anchor_timestamp: float
    invocation_id: str
    author: str
    branch: str | None
    isolation_scope: str | None
    node_path: str | None
    reason: str
    calls: tuple[DeadCall, ...]

    @property
    def call_ids(self) -> tuple[str, ...]:
        """The ids of the answered calls."""
        return tuple(c.call_id for c in self.calls)

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of the answered calls' tools."""
        return tuple(c.name for c in self.calls)


def heal_event_id(
    app_name: str, user_id: str, session_id: str, call_event_id: str, attempt: int = 1,
    *, suffix: str = HEAL_ID_SUFFIX,
) -> str:
    """Returns the deterministic id of the heal answering one call event.

    Args:
        app_name: The session's app.
        user_id: The session's user.
        session_id: The session id.
        call_event_id: The id of the event holding the dead calls.
        attempt: 1 for the first heal of that call event; a later number only
            if an earlier heal of it already exists and calls remain dead.
        suffix: What follows the call event's id: ``-heal``, or another
            synthetic kind's (an operator's resolution: ``-resolved``).

    Returns:
        ``"<call_event_id>-heal"`` (``-heal-<attempt>`` after the first), or a
        UUID5 of the session, the call event and the kind when that would
        exceed the 128 characters ADK's id column holds.
    """
    tail = suffix if attempt == 1 else f"{suffix}-{attempt}"
    candidate = f"{call_event_id}{tail}"
    if len(candidate) <= _MAX_ID_LENGTH:
        return candidate
    parts: tuple[str, ...] = (app_name, user_id, session_id, call_event_id, str(attempt))
    if suffix != HEAL_ID_SUFFIX:  # a heal's UUID keeps the name it always had
        parts = (*parts, suffix)
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join(parts)))


def placement(after_ts: float, next_ts: float | None) -> float:
    """Returns a timestamp strictly after ``after_ts`` and, when there is room, before ``next_ts``.

    Whole microseconds: ``after_ts``'s microsecond (rounded down) plus a step
    of at least one, re-checked against the float so the result never equals
    ``after_ts`` even where a stored time has sub-microsecond digits.
    """
    after_us = math.floor(after_ts * 1_000_000)
    step = _DEFAULT_GAP_US
    if next_ts is not None:
        step = max(1, min(_DEFAULT_GAP_US, (math.floor(next_ts * 1_000_000) - after_us) // 2))
    placed = (after_us + step) / 1_000_000
    while placed <= after_ts:
        step += 1
        placed = (after_us + step) / 1_000_000
    return placed


def _anchor(steps: Sequence[Step], author: Callable[[int], str], index: int) -> int:
    """Returns the index of the event a heal of the call event at ``index`` goes after.

    Anthropic merges consecutive model events (calls, text) into one turn and
    wants every ``tool_use`` of it answered at the beginning of the next turn.
    So when the call event is followed by more model events (``author`` tells
    them from a user's message) and then by responses, one of them to a call
    of this model turn made at or before ``index``, a heal right after the
    call would split that call from its answer. The heal goes into the
    answer's turn instead: after the last of those model events, and after
    the responses that open that turn by answering the later calls (Gemini
    wants those right after their call). A user's message before the answer
    does not end that turn: Anthropic merges it with the answer into one user
    turn, which the heal then opens. Every other provider already rejects
    the early call's answer where it is (a model event sits between it and
    its call), so nothing gets worse. Otherwise the call event itself.
    """
    def model(i: int) -> bool:
        return not steps[i][1] and author(i) != "user"

    first = index
    while first > 0 and model(first - 1):
        first -= 1
    last = index
    while last + 1 < len(steps) and model(last + 1):
        last += 1
    if last == index:
        return index
    turn_ids = {call_id for step in steps[first:index + 1] for call_id, _ in step[0]}

    def answers_turn(i: int) -> bool:
        return any(r in turn_ids for r, _ in steps[i][1])

    place = last + 1  # past the answers of the turn's later calls, which Gemini wants next
    while place < len(steps) and steps[place][1] and not answers_turn(place):
        place += 1
    for i in range(place, len(steps)):
        if model(i):
            break  # a model turn between: Anthropic has the answer late anyway
        if answers_turn(i):  # a user's message before it merges into the same user turn
            return place - 1
    return index


def plan_heals(
    events: Sequence[E],
    findings: SessionFindings,
    *,
    app_name: str,
    user_id: str,
    session_id: str,
    access: EventAccess[E] = ADK_EVENTS,  # type: ignore[assignment]
) -> tuple[HealPlan, ...]:
    """Plans one heal per call event that holds dead calls.

    Args:
        events: The classified events, oldest first.
        findings: :func:`~adk_session_heal.core.findings.classify` of ``events``.
        app_name: The session's app (for the id fallback).
        user_id: The session's user (for the id fallback).
        session_id: The session id (for the id fallback).
        access: How to read ``events``.

    Returns:
        The heals, ordered by the position of their call events.
    """
    dead_by_event: dict[int, list[DeadCall]] = {}
    reasons: dict[int, str] = {}
    for finding in findings.calls:
        if finding.status not in HEALABLE or finding.call_id is None:
            continue
        dead_by_event.setdefault(finding.event_index, []).append(
            DeadCall(finding.call_id, finding.name, finding.status.value,
                     outcome=finding.outcome, recovered=finding.recovered)
        )
        reasons[finding.event_index] = finding.status.value
    if not dead_by_event:
        return ()

    existing_ids = {access.event_id(event) for event in events}
    steps = findings.steps_of(events)
    if steps is None:
        steps, _ = access.steps(events)

    def author(i: int) -> str:  # read only around each call event
        return access.author(events[i])

    plans: list[HealPlan] = []
    for index in sorted(dead_by_event):
        event = events[index]
        call_event_id = access.event_id(event)
        attempt = 1
        event_id = heal_event_id(app_name, user_id, session_id, call_event_id, attempt)
        while event_id in existing_ids:
            attempt += 1
            event_id = heal_event_id(app_name, user_id, session_id, call_event_id, attempt)
        anchor = _anchor(steps, author, index)
        anchor_ts = access.timestamp(events[anchor])
        next_ts = access.timestamp(events[anchor + 1]) if anchor + 1 < len(events) else None
        plans.append(
            HealPlan(
                call_event_id=call_event_id,
                call_event_index=index,
                insert_at=anchor + 1,
                event_id=event_id,
                timestamp=placement(max(anchor_ts, access.timestamp(event)), next_ts),
                anchor_event_id=access.event_id(events[anchor]),
                anchor_timestamp=anchor_ts,
                invocation_id=access.invocation_id(event),
                author=access.author(event),
                branch=access.branch(event),
                isolation_scope=access.isolation_scope(event),
                node_path=access.node_path(event),
                reason=reasons[index],
                calls=tuple(dead_by_event[index]),
            )
        )
    return tuple(plans)
