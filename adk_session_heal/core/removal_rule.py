"""The one rule for taking a row back out of storage: only our own, unchanged, in its place.

Every deletion this package makes (a heal a late result superseded, the heal
or resolution an operator's resolution supersedes, the heals ``repair --undo``
takes back) goes through each layout's one remover, which calls
:func:`removal_problem` inside its write transaction with the session's
events as stored. A row is taken out only when all of this holds, else it is
kept and reported:

* **ours, unchanged**: it carries our marker, and its stored JSON is exactly
  what was written: its marker's ``seal``
  (:func:`~adk_session_heal.core.healing.row_seal`, set by the one heal builder)
  matches the row, and, when the caller holds the digest the ledger recorded
  as the row was written (an undo does), that matches too. A row with
  neither (written before seals existed, and not by a recorded ``repair``
  run) is never taken out;
* **in its place**: the call event its marker names exists in the session as
  stored, and ADK's pairing rule (:func:`~adk_session_heal.core.pairing.pair`)
  attributes every response of the row to a call of that very event, the
  calls its marker lists and no other: a look-alike row naming a user message,
  or any event it does not answer, is not a heal of that call;
* **superseded**, for a late result or a resolution: in the session as
  stored, every call it answers has another answer that supersedes it
  (:func:`~adk_session_heal.core.late_results.late_results`), so taking it out
  leaves no call unanswered. An undo takes the calls back to dead on
  purpose, and does not ask this.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from .event_access import EventAccess
from .healing import SEAL_KEY, event_digest, row_seal
from .late_results import late_results
from .pairing import pair

E = TypeVar("E")


def removal_problem(
    events: Sequence[E],
    index: int,
    stored: Mapping[str, Any],
    *,
    call_event_id: str,
    digest: str | None,
    superseded: bool,
    access: EventAccess[E],
) -> str | None:
    """Says why the row at ``index`` may not be taken out, or ``None`` when it may.

    Args:
        events: The session's events as stored, in its layout's read order.
        index: The row's position in ``events``.
        stored: The row's JSON object exactly as stored (for the seal and the
            digest).
        call_event_id: The call event the caller means to take the heal of
            (it must be the one the marker names).
        digest: The :func:`~adk_session_heal.core.healing.event_digest` the ledger
            recorded for the row (``None``: none known; ``""``: recorded as
            unknown, so never matched).
        superseded: The row must still be superseded (a late result, a
            resolution).
        access: How to read ``events``.

    Returns:
        ``None``, or a short phrase saying what is wrong with the row.
    """
    marker = access.heal_marker(events[index])
    if marker is None or marker.get("synthetic") is not True:
        return "it is not a synthetic event of ours"
    seal = marker.get(SEAL_KEY)
    if seal is None and digest is None:
        return "it carries no seal and no ledger digest, so it cannot be told unchanged"
    if seal is not None and seal != row_seal(stored):
        return "it was changed after it was written"
    if digest is not None and event_digest(stored) != digest:
        return "it is not the row the ledger recorded (changed since)"
    named = marker.get("call_event_id")
    if named != call_event_id:
        return f"its marker names call event {named!r}, not {call_event_id!r}"
    steps, _ = access.steps(events)
    responses = steps[index][1]
    call_ids = marker.get("call_ids")
    if (not responses or not isinstance(call_ids, list)
            or sorted(r for r, _ in responses if r) != sorted(map(str, call_ids))
            or len(responses) != len(call_ids)):
        return "its responses are not the calls its marker lists"
    owners = [occurrence.step for occurrence in pair(steps).occurrences
              for step in occurrence.responses if step == index]
    if len(owners) != len(responses) or any(
            access.event_id(events[owner]) != named for owner in owners):
        return f"it does not answer calls of event {named!r} in the session as stored"
    if superseded and all(late.heal_index != index for late in late_results(events, access)):
        return "a call it answers has no other answer (nothing supersedes it)"
    return None
