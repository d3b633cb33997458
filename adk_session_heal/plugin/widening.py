"""What a custom filter broke: restoring the missing halves, and counting breaks.

A custom filter runs on the trimmed window and may drop a call whose response
it keeps, or the user turn a call turn needs before it. :func:`widen` puts the
missing halves back from the trimmed contents; :func:`broken` counts the calls
that are still not whole, so the window can tell whether its repair made
things worse. The rules are :mod:`adk_session_heal.provider_rules`'; what
remains broken is then repaired by
:func:`~adk_session_heal.request_repair.repair_contents`. Pure: no I/O.
"""

from __future__ import annotations

from google.genai import types

from ..provider_rules import Verdict, call_turn_in_order, whole
from ..request_repair import Pending

__all__ = ["broken", "widen"]


def widen(trimmed: list[types.Content], verdict: Verdict, filtered: list[types.Content],
          pending: Pending) -> list[types.Content]:
    """Restores what the filter's output needs from the trimmed contents.

    Args:
        trimmed: The contents the filter was given.
        verdict: ``contents_verdict(trimmed)``.
        filtered: What the filter returned.
        pending: Calls whose responses are not restored.

    Returns:
        ``filtered`` with the calls, responses and user turns it needs from
        ``trimmed`` put back in place; ``filtered`` itself if nothing is
        missing or the filter reordered or repeated contents.
    """
    position = {id(c): i for i, c in enumerate(trimmed)}
    origin = [position.get(id(c)) for c in filtered]
    known = [i for i in origin if i is not None]
    if any(b <= a for a, b in zip(known, known[1:], strict=False)):
        return filtered  # reordered or repeated: nothing to widen into; drop instead.
    partners: list[list[int]] = [[] for _ in trimmed]
    for occurrence in verdict.pairing.occurrences:
        if pending.covers(occurrence.id, occurrence.name):
            continue
        for response in occurrence.responses:
            partners[occurrence.step].append(response)
            partners[response].append(occurrence.step)
    for index, (calls, _responses) in enumerate(verdict.steps):
        if calls and index > 0 and call_turn_in_order(trimmed[index - 1].role):
            partners[index].append(index - 1)  # the turn a call turn must follow
    kept = [False] * len(trimmed)
    work = list(known)
    for index in known:
        kept[index] = True
    restored = [False] * len(trimmed)
    while work:
        index = work.pop()
        for partner in partners[index]:
            if not kept[partner]:
                kept[partner] = restored[partner] = True
                work.append(partner)
    if not any(restored):
        return filtered
    result: list[types.Content] = []
    cursor = 0
    for content, source in zip(filtered, origin, strict=True):
        if source is not None:
            while cursor < source:
                if restored[cursor]:
                    result.append(trimmed[cursor])
                cursor += 1
            cursor = source + 1
        result.append(content)
    result.extend(trimmed[i] for i in range(cursor, len(trimmed)) if restored[i])
    return result


def broken(verdict: Verdict, pending: Pending) -> int:
    """Counts orphaned responses and calls that are not whole, pending calls aside."""
    count = len(verdict.pairing.orphans)
    for occurrence, ok in zip(verdict.pairing.occurrences, whole(verdict), strict=True):
        if not ok and not pending.covers(occurrence.id, occurrence.name):
            count += 1
    return count
