"""Pairing of tool calls with their responses: ADK's attribution rule, written once.

A history is a sequence of *steps*. A step is one position in it (an ADK event,
a chat message, a ``Content``) and holds the function-call parts and the
function-response parts found there. :func:`pair` walks the steps once and
attributes every response to a call occurrence, following ADK 2.13
(``google/adk/flows/llm_flows/tools/_rearranger.py``):

* Ids can repeat within a session, so a *call occurrence* is one call part at one
  step, not an id.
* A response belongs to the newest call occurrence that precedes it and carries
  the same id. Within one step, responses are applied before calls, so a step
  never answers its own calls. When the newest step holding that id holds it
  more than once (parallel calls sharing an id, as some models emit), its
  responses are dealt out in order to those occurrences (the first response to
  the first call, and so on; a surplus one goes to the newest), so each gets
  its own answer. ADK attributes a response to the event holding its call, so
  this only decides which of one event's calls an answer counts for.
* A response with no id belongs to the newest preceding id-less call of the same
  name (ADK keeps such a response when an id-less call of that name was seen).
  With ``idless="positional"``, id-less responses are instead dealt out in
  order to the id-less calls of that name in the newest step holding such
  calls (the first response to the first call, and so on), as Gemini and
  Anthropic's id sanitiser pair parallel calls of one tool; a response left
  over when all of them are answered goes to the newest one.
* A response with no preceding call to belong to is *orphaned* (ADK drops it from
  the request).

Everything that pairs calls in this package (classification of stored events,
the context filter plugin, the provider-format helpers and validators) calls
:func:`pair`, or :func:`response_owners` where only steps matter; none
re-implements it. This module imports nothing but the
standard library.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

Ref = tuple[str | None, str]
"""One function-call or function-response part: ``(id or None, name)``.

A plain tuple rather than a named one: histories are paired on every
``get_session``, and building named tuples costs more than the pairing.
"""

Step = tuple[Sequence[Ref], Sequence[Ref]]
"""The parts found at one position of a history: ``(calls, responses)``."""

EMPTY_STEP: Step = ((), ())
"""The step of a position that holds no call and no response (shared, immutable)."""


@dataclass(slots=True)
class CallOccurrence:
    """One call part at one step, with the steps of the responses attributed to it.

    Attributes:
        step: Index of the step holding the call.
        position: Index of the call among the step's calls.
        id: The call id, or ``None``.
        name: The function name.
        responses: Step indices of the responses attributed to this occurrence, in
            history order (one entry per response part).
    """

    step: int
    position: int
    id: str | None
    name: str
    responses: list[int] = field(default_factory=list)

    @property
    def answered(self) -> bool:
        """Whether at least one response was attributed to this occurrence."""
        return bool(self.responses)


class OrphanedResponse(NamedTuple):
    """A response part with no preceding call to belong to.

    Attributes:
        step: Index of the step holding the response.
        id: The response id, or ``None``.
        name: The function name.
    """

    step: int
    id: str | None
    name: str


@dataclass(frozen=True, slots=True)
class Pairing:
    """The result of :func:`pair`.

    Attributes:
        occurrences: Every call occurrence, in history order.
        orphans: Every orphaned response, in history order.
    """

    occurrences: tuple[CallOccurrence, ...]
    orphans: tuple[OrphanedResponse, ...]

    @property
    def unanswered(self) -> tuple[CallOccurrence, ...]:
        """The occurrences no response was attributed to."""
        return tuple(o for o in self.occurrences if not o.responses)


IdlessRule = Literal["newest", "positional"]
"""How id-less responses are attributed: see :func:`pair`."""


def pair(steps: Iterable[Step], *, idless: IdlessRule = "newest") -> Pairing:
    """Attributes every response of a history to a call occurrence.

    Args:
        steps: The history, oldest first. Steps with neither calls nor responses
            may be passed as :data:`EMPTY_STEP`; they cost one comparison.
        idless: ``"newest"`` (the default, ADK's rule): an id-less response
            belongs to the newest preceding id-less call of its name.
            ``"positional"``: id-less responses are dealt out in order to the
            id-less calls of their name in the newest step holding such calls,
            so parallel id-less calls of one tool each get their own response
            (how providers without ids pair them); surplus responses go to the
            newest of those calls.

    Returns:
        The occurrences (each with the steps of its responses) and the orphaned
        responses.
    """
    newest_by_id: dict[str, _Newest] = {}
    newest_idless_by_name: dict[str, CallOccurrence] = {}
    idless_queues: dict[str, _Newest] = {}
    positional = idless == "positional"
    occurrences: list[CallOccurrence] = []
    orphans: list[OrphanedResponse] = []
    record = occurrences.append
    for index, (calls, responses) in enumerate(steps):
        if not calls and not responses:
            continue
        for response_id, response_name in responses:
            if response_id:
                owner = newest_by_id.get(response_id)
                if isinstance(owner, _StepQueue):
                    owner = _deal(owner)
            elif positional:
                owner = idless_queues.get(response_name)
                if isinstance(owner, _StepQueue):
                    owner = _deal(owner)
            else:
                owner = newest_idless_by_name.get(response_name)
            if owner is None:
                orphans.append(OrphanedResponse(index, response_id, response_name))
            else:
                owner.responses.append(index)
        for position, (call_id, call_name) in enumerate(calls):
            occurrence = CallOccurrence(index, position, call_id, call_name, [])
            record(occurrence)
            if call_id:
                same = newest_by_id.get(call_id)
                if same is None or same.step != index:  # the usual case, inlined
                    newest_by_id[call_id] = occurrence
                else:
                    _enqueue(newest_by_id, call_id, occurrence)
            elif positional:
                _enqueue(idless_queues, call_name, occurrence)
            else:
                newest_idless_by_name[call_name] = occurrence
    return Pairing(tuple(occurrences), tuple(orphans))


def answered_once(steps: Iterable[Step], called: set[str] | None = None) -> bool:
    """Whether every call of a history is answered by exactly one response, and nothing else.

    The healthy session's shape, checked without pairing: every call part has
    an id no other call part uses, and every response part answers a call of
    an earlier step (within a step responses come first, as :func:`pair`
    reads them) that no response answered yet. When this holds, :func:`pair`
    attributes exactly one response to every occurrence and finds no orphan,
    so a classifier can skip pairing until it is asked for the per-call
    findings. It costs a third of :func:`pair` (no occurrence objects) and
    returns at the first part that breaks the shape.

    Args:
        steps: The history, oldest first (empty steps may be :data:`EMPTY_STEP`).
        called: To go on from a prefix of the history for which this held: the
            ids its calls used (every one of them answered). The ids of the
            calls in ``steps`` are added to it as they are read.
    """
    open_ids: set[str] = set()
    if called is None:
        called = set()
    for calls, responses in steps:
        if not calls and not responses:
            continue
        for response_id, _ in responses:
            if not response_id or response_id not in open_ids:
                return False
            open_ids.remove(response_id)
        for call_id, _ in calls:
            if not call_id or call_id in called:
                return False
            called.add(call_id)
            open_ids.add(call_id)
    return not open_ids


def repeated_ids(calls: Sequence[Ref]) -> frozenset[str]:
    """The ids that two or more calls of one step carry (parallel calls sharing an id).

    :func:`pair` gives each such call its own answer, but a request holding
    them is refused whatever answers them (OpenAI: two ``tool`` messages with
    one ``tool_call_id``; Anthropic: ``tool_use`` ids must be unique), so
    classification reports them instead of healing them and the validators
    name them (see :mod:`adk_session_heal.providers.provider_rules`).

    Args:
        calls: One step's calls.

    Returns:
        The repeated ids (empty for the usual step, at the cost of one set).
    """
    if len(calls) < 2:
        return frozenset()
    seen: set[str] = set()
    repeated: set[str] = set()
    for call_id, _ in calls:
        if call_id:
            if call_id in seen:
                repeated.add(call_id)
            seen.add(call_id)
    return frozenset(repeated)


@dataclass(slots=True)
class _StepQueue:
    """The calls of one id (or id-less calls of one name) in the newest step holding them."""

    step: int
    members: list[CallOccurrence]
    cursor: int = 0


_Newest = CallOccurrence | _StepQueue
"""The newest step's calls of one id (or id-less name): one occurrence, or a queue of several.

A lone call needs no queue (every response dealt to it goes to it), and most
calls are alone in their step, so the queue is only built for a second one.
"""


def _enqueue(newest: dict[str, _Newest], key: str, occurrence: CallOccurrence) -> None:
    """Records ``occurrence`` as the newest call of ``key``, queued after its step's others."""
    same = newest.get(key)
    if same is None or same.step != occurrence.step:
        newest[key] = occurrence
    elif isinstance(same, CallOccurrence):
        newest[key] = _StepQueue(occurrence.step, [same, occurrence])
    else:
        same.members.append(occurrence)


def _deal(queue: _StepQueue) -> CallOccurrence:
    """Returns the next unanswered member of a queue (its last once all are)."""
    if queue.cursor < len(queue.members):
        queue.cursor += 1
        return queue.members[queue.cursor - 1]
    return queue.members[-1]


def response_owners(steps: Iterable[Step]) -> list[tuple[int, int]]:
    """The same attribution as :func:`pair`, seen at step level: ``(call step, response step)``.

    Which occurrence of a step answers a response (the dealing of shared ids
    and id-less calls) never changes *which step* it is: the newest earlier
    step holding a call with the response's id (id-less: an id-less call of
    its name), responses before calls within a step. That is what the context
    filter needs, for every response of a long history, and it needs no
    occurrence objects; a property test pins it to :func:`pair` under both
    id-less rules.

    Args:
        steps: The history, oldest first (empty steps may be :data:`EMPTY_STEP`).

    Returns:
        One ``(call step, response step)`` per attributed response part, in
        history order; orphaned responses are left out.
    """
    by_id: dict[str, int] = {}
    by_name: dict[str, int] = {}
    owners: list[tuple[int, int]] = []
    record = owners.append
    for index, step in enumerate(steps):
        if step is EMPTY_STEP:
            continue
        calls, responses = step
        if responses:
            for response_id, response_name in responses:
                owner = by_id.get(response_id) if response_id else by_name.get(response_name)
                if owner is not None:
                    record((owner, index))
        if calls:
            for call_id, call_name in calls:
                if call_id:
                    by_id[call_id] = index
                else:
                    by_name[call_name] = index
    return owners
