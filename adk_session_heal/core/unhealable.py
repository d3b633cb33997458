"""Unanswered calls a heal would make worse, for some reader: reported, never healed.

ADK 2.10+ builds each model request without the calls nothing answers
(``drop_orphaned_function_calls`` in ``google/adk/flows/llm_flows/tools/
_rearranger.py``): a call with an id stays out unless a response somewhere
carries that id (long-running calls and calls without an id always stay). A
heal is such a response, so it brings its call back, and every other call of
that id. For most calls that is the point. For the calls below it turns a
request a provider accepted into one it refuses, for some supported ADK, so
:func:`~adk_session_heal.core.findings.classify` gives them their own status:

* ``malformed``: the call is one no provider accepts even once answered, or
  one ADK 1.x would pair with the wrong heal:

  - its name is empty: ADK's LiteLlm adapter raises "LiteLLM function calls
    require a name" before sending;
  - another call of its event carries its id
    (:func:`~adk_session_heal.core.pairing.repeated_ids`): OpenAI refuses a second
    ``tool`` message with one ``tool_call_id``, Anthropic a second
    ``tool_use`` with one id;
  - its event shares an id with another call event, and one of the two holds
    more than one call: ADK 1.x pairs by id alone (every call event carrying
    an id gets the last response event carrying it), so a heal would also be
    sent after the other event, with answers to calls that are not there;
  - or another unanswered call of its id is malformed (a heal of it would
    bring that one back).

* ``out_of_turn``: Gemini refuses the call's turn where it stands ("function
  call turn comes immediately after a user turn or after a function response
  turn"): in the request ADK would build with it answered, the content before
  it is a turn of its own agent (a text reply, or calls nothing answers). Only
  a call event none of whose calls ADK keeps unanswered is judged (one it keeps
  is in the request already, turn and all), and every other unanswered call of
  its id with it.

Where a call event's turn stands is read off the stored events as ADK 2.10+
presents them to the call's agent: responses are left out (ADK moves each to
right after its call, or drops it when no call precedes it), as are events
with nothing visible (:meth:`~adk_session_heal.core.event_access.EventAccess.speaks`),
partial and compaction events, annulled events and events of branches the
agent does not see. A call event is followed by a response turn when one of
its calls is answered or healed; another agent's event, or the user's, is a
user turn.

Unhealed, such calls cost the ADK 2.10+ request nothing (it leaves them out).
ADK 1.x and 2.0-2.9 keep every call in the request: there the provider that
refuses such a call refuses the request healed or not, and ADK's LiteLlm
adapter (1.22+) sends a placeholder result for each unanswered call. A heal
would help there only a native model the call does not trouble (Gemini for
an id repeated in one event, Anthropic for a call out of Gemini's turn
order; for an id two call events share, also on ADK 2.10+, which sends it
when another call of that id is answered), at the price of breaking a
request another reader sends; leaving the calls alone makes no reader's
request worse. The request-side repairer
(:mod:`adk_session_heal.providers.request_repair`) can still drop them from one
request. ``tests/adk_matrix/odd_histories.py`` checks
this against each ADK's own request builder. The module is pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from .findings import HEALABLE, CallFinding, CallStatus
from .pairing import CallOccurrence, Step, repeated_ids

if TYPE_CHECKING:
    from .event_access import EventAccess

E = TypeVar("E")

_OPEN = frozenset({CallStatus.SUPERSEDED, CallStatus.STALE, CallStatus.IN_FLIGHT})
"""Statuses an unhealable call had: unanswered, not pending (whatever its age)."""

_REFUSED = frozenset({CallStatus.MALFORMED, CallStatus.OUT_OF_TURN})

_ANSWERING = frozenset({*HEALABLE, CallStatus.ANSWERED})
"""Statuses of a call a response follows in the request (healed ones included)."""


def judge_unhealable(
    events: Sequence[E],
    access: EventAccess[E],
    occurrences: Sequence[CallOccurrence],
    calls: list[CallFinding],
    steps: Sequence[Step],
    live: Sequence[bool] | None,
) -> list[CallFinding]:
    """Marks the unanswered calls an answer would make worse (see the module docstring).

    Args:
        events: The classified events.
        access: How to read them.
        occurrences: Every call occurrence (``pair``'s), aligned with ``calls``.
        calls: Their findings; the ``superseded``, ``stale`` and ``in_flight``
            ones may become ``malformed`` or ``out_of_turn``.
        steps: Each event's calls and responses (annulled events empty).
        live: Which events a rewind left standing (``None``: all).

    Returns:
        ``calls``, with those statuses changed (the same list when none is).
    """
    status = [c.status for c in calls]
    if not any(s in _OPEN for s in status):
        return calls
    answered = {o.id for o in occurrences if o.id and o.responses}
    answered.update(c.call_id for c in calls if c.call_id and c.status is CallStatus.ANSWERED)

    steps_by_id: dict[str, set[int]] = {}
    for occurrence in occurrences:
        if occurrence.id:
            steps_by_id.setdefault(occurrence.id, set()).add(occurrence.step)
    tangled = {step for steps_of_id in steps_by_id.values() if len(steps_of_id) > 1
               and any(len(steps[step][0]) > 1 for step in steps_of_id)
               for step in steps_of_id}
    repeated: dict[int, frozenset[str]] = {}
    for index, occurrence in enumerate(occurrences):
        if status[index] in _OPEN:
            step = occurrence.step
            if step not in repeated:
                repeated[step] = repeated_ids(steps[step][0])
            if not occurrence.name or occurrence.id in repeated[step] or step in tangled:
                status[index] = CallStatus.MALFORMED

    by_event: dict[int, list[int]] = {}
    for index, occurrence in enumerate(occurrences):
        by_event.setdefault(occurrence.step, []).append(index)
    turns = _Turns(events, access, occurrences, steps, status, by_event, answered, live)
    changed = True
    while changed:  # each round refuses more calls: it ends
        changed = False
        for event_index, members in by_event.items():
            if (any(status[i] in _OPEN for i in members) and not turns.kept(event_index)
                    and not turns.in_turn(event_index)):
                for i in members:
                    if status[i] in _OPEN:
                        status[i], changed = CallStatus.OUT_OF_TURN, True
        reasons = {occurrences[i].id: s for i, s in enumerate(status)
                   if s in _REFUSED and occurrences[i].id and occurrences[i].id not in answered}
        for index, occurrence in enumerate(occurrences):
            reason = reasons.get(occurrence.id) if occurrence.id else None
            if reason is not None and status[index] in _OPEN:
                status[index], changed = reason, True
    if all(s is c.status for s, c in zip(status, calls, strict=True)):
        return calls
    return [c if s is c.status else replace(c, status=s)
            for s, c in zip(status, calls, strict=True)]


class _Turns:
    """Reads where a call event's turn stands in the request ADK 2.10+ builds."""

    def __init__(self, events: Sequence[E], access: EventAccess[E],
                 occurrences: Sequence[CallOccurrence], steps: Sequence[Step],
                 status: list[CallStatus],
                 by_event: dict[int, list[int]], answered: set[str],
                 live: Sequence[bool] | None) -> None:
        self._events = events
        self._access = access
        self._occurrences = occurrences
        self._steps = steps
        self._status = status
        self._by_event = by_event
        self._answered = answered
        self._live = live

    def kept(self, index: int) -> bool:
        """Whether ADK keeps a call of this event in the request without a heal."""
        for i in self._by_event.get(index, ()):
            occurrence = self._occurrences[i]
            if (occurrence.id is None or occurrence.id in self._answered
                    or self._status[i] is CallStatus.PENDING):
                return True
        return False

    def _answered_after(self, index: int) -> bool:
        """Whether a response turn follows this call event (a call answered or healed)."""
        return any(self._occurrences[i].responses or self._status[i] in _ANSWERING
                   for i in self._by_event.get(index, ()))

    def in_turn(self, index: int) -> bool:
        """Whether the content before this call event, as ADK presents it, is a user turn."""
        events, access = self._events, self._access
        author = access.author(events[index])
        branch = access.branch(events[index])
        for j in range(index - 1, -1, -1):
            event = events[j]
            if ((self._live is not None and not self._live[j]) or access.is_partial(event)
                    or access.is_compaction(event) or not _sees(branch, access.branch(event))):
                continue
            other = access.author(event)
            if j in self._by_event:
                if other != author:
                    return True  # another agent's calls reach the model as user context
                if self._answered_after(j):
                    return True
                if self.kept(j) or access.speaks(event):
                    return False
                continue  # every call of it left out, and nothing else to show
            if self._responds(j) or not access.speaks(event):
                continue  # moved next to its call, or dropped; or nothing to show
            return other != author
        return False  # a call turn opening the request

    def _responds(self, index: int) -> bool:
        return bool(self._steps[index][1])


def _sees(branch: str | None, other: str | None) -> bool:
    """ADK's ``_is_event_belongs_to_branch``: an agent sees its branch and its ancestors'."""
    return not branch or not other or branch == other or branch.startswith(f"{other}.")
