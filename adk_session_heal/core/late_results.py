"""Late results: a real response that arrives after a call was healed supersedes the heal.

A call is healed when it looks dead; sometimes it was not (a tool that outlived
``stale_after``, another replica finishing the run) and its real response is
stored later. The session then answers that call twice, and readers disagree
on which answer counts: ADK 2.x keeps the last response of a call when it
builds a request, ADK 1.x moves responses by id, and every provider rejects a
call answered twice. So the heal is taken out of storage: :func:`late_results`
finds each heal whose every call has a real (non-synthetic) response
attributed to the same call occurrence (ADK's rule, see
:mod:`~adk_session_heal.core.pairing`), wherever that response sorts. A heal that
still answers one dead call is kept: taking it out would leave that call
unanswered.

An operator's resolution (``adk-session-heal review resolve``, see
:mod:`~adk_session_heal.core.review`) is written like a heal, marked ``"reason":
"resolved"``, right after the heal it answers for: it supersedes every heal
(or earlier resolution) of its calls before it, as a real response does.

What the removal leaves, what each ADK sends a model for it, and which stores
can take a row out, is in the README ("Late results"). The module is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .event_access import ADK_EVENTS, EventAccess
from .pairing import pair

RESOLVED_REASON = "resolved"
"""The marker ``reason`` of an operator's resolution (the call's true outcome)."""


def is_resolution(marker: Mapping[str, Any] | None) -> bool:
    """Whether a heal marker is an operator's resolution."""
    return marker is not None and marker.get("reason") == RESOLVED_REASON

E = TypeVar("E")


@dataclass(frozen=True, slots=True)
class LateResult:
    """A heal every one of whose calls got its real response after all.

    Attributes:
        heal_index: Position of the heal event in the list classified.
        heal_event_id: The heal event's id (the row to take out).
        call_event_id: The call event the heal answered.
        call_ids: The calls it answered, in its marker's order.
        tool_names: Each call's tool, as the marker names it.
        response_event_ids: The events holding their real responses, oldest first.
    """

    heal_index: int
    heal_event_id: str
    call_event_id: str
    call_ids: tuple[str, ...]
    tool_names: tuple[str, ...]
    response_event_ids: tuple[str, ...]


def superseding_answers(
    events: Sequence[E], access: EventAccess[E] = ADK_EVENTS  # type: ignore[assignment]
) -> dict[int, dict[str, list[int]]]:
    """Returns, for each heal of ours, the answers that supersede it, call by call.

    An answer supersedes a heal's answer to a call when ADK attributes both to
    the same call occurrence (:func:`~adk_session_heal.core.pairing.pair`) and it is
    a real (non-synthetic) response, wherever it sorts, or an operator's
    resolution stored after the heal. This is the one decision behind
    :func:`late_results` (a heal all of whose calls are superseded), the
    calls ``review`` lists (none superseded) and the calls ``review resolve``
    refuses (one with a real response): none of them re-derives it.

    Args:
        events: A session's events, oldest first, as stored.
        access: How to read ``events``.

    Returns:
        ``{heal index: {call id: [indices of the superseding answers]}}``, a
        key for every event carrying our marker (its map empty when nothing
        supersedes it); ``{}`` when there is none (one pass over the events).
    """
    steps, _ = access.steps(events)
    markers = {i: marker for i, step in enumerate(steps)
               if step[1] and (marker := access.heal_marker(events[i])) is not None}
    if not markers:
        return {}
    found: dict[int, dict[str, list[int]]] = {i: {} for i in markers}
    for occurrence in pair(steps).occurrences:
        responses = occurrence.responses
        if len(responses) < 2 or not occurrence.id:
            continue
        for heal_index in responses:
            if heal_index not in markers:
                continue
            real = [i for i in responses if i not in markers
                    or (i > heal_index and is_resolution(markers[i]))]
            if real:
                found[heal_index][occurrence.id] = real
    return found


def late_results(
    events: Sequence[E], access: EventAccess[E] = ADK_EVENTS  # type: ignore[assignment]
) -> tuple[LateResult, ...]:
    """Returns every heal in ``events`` that real responses have superseded.

    Args:
        events: A session's events, oldest first, as stored.
        access: How to read ``events``.

    Returns:
        One :class:`LateResult` per superseded heal, in history order; empty when
        no heal is superseded (the usual case: one pass over the events).
    """
    answers = superseding_answers(events, access)
    found: list[LateResult] = []
    for heal_index, answered in answers.items():
        marker = access.heal_marker(events[heal_index]) or {}
        call_ids = tuple(c for c in marker.get("call_ids") or () if isinstance(c, str))
        if not call_ids or any(call_id not in answered for call_id in call_ids):
            continue
        indices = sorted({i for call_id in call_ids for i in answered[call_id]})
        names = [str(n) for n in marker.get("tool_names") or ()]
        found.append(LateResult(
            heal_index=heal_index,
            heal_event_id=access.event_id(events[heal_index]),
            call_event_id=str(marker.get("call_event_id", "")),
            call_ids=call_ids,
            tool_names=tuple((names + [""] * len(call_ids))[:len(call_ids)]),
            response_event_ids=tuple(access.event_id(events[i]) for i in indices),
        ))
    return tuple(found)
