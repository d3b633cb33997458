"""Where the context window starts: whole invocations, never a split tool cycle.

* An invocation starts at one or more consecutive human user contents (a
  function response content is role ``user`` but not human) and holds
  everything up to the next human content (ADK's definition).
* The window only ever starts at a *safe cut*: an invocation start after which
  no response belongs to a call before it (pairing is
  :func:`~adk_session_heal.pairing.pair`'s). A cut that is not safe widens back
  to the nearest safe one, so a tool cycle answered across invocations is kept
  whole (ADK-Java semantics, by invocation rather than by content, so the
  window still starts with a human message).

:func:`trim` finds the count-mode cut from the end (:func:`tail_cut`) when it
can; beside a protected prefix that opens tool cycles it then pairs only what
lies below that cut to close them (:func:`_closed_before`). Otherwise (a budget,
or a tail needing more widenings than :func:`tail_cut` tries) it makes one pass
over every content plus a step-level pairing
(:func:`~adk_session_heal.pairing.response_owners`, :func:`full_trim`).
Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.genai import types

from ..event_access import content_step, content_steps
from ..pairing import OrphanedResponse, pair, response_owners

if TYPE_CHECKING:
    from .window import ContextWindow

__all__ = ["full_trim", "tail_cut", "trim"]


@dataclass(slots=True)
class _Shape:
    """What the trim needs to know about contents, from one pass plus pairing."""

    reach: dict[int, int]  # per content holding answered calls: its last response
    starts: list[int]  # invocation starts
    safe: list[int]  # invocation starts no response after which has its call before


def _shape(contents: Sequence[types.Content]) -> _Shape:
    steps, roles = content_steps(contents)  # the one pass over every part
    humans = [index for index, role in enumerate(roles)
              if role == "user" and not steps[index][1]]
    starts = [index for position, index in enumerate(humans)
              if not position or humans[position - 1] != index - 1]
    # Responses come in history order: each call's last one is kept.
    reach = {call: response for call, response in response_owners(steps)}
    return _Shape(reach, starts, _safe_starts(starts, reach))


def _safe_starts(starts: list[int], reach: dict[int, int]) -> list[int]:
    """The starts ``s`` no response at or after which belongs to a call before ``s``.

    One sweep over the starts and the answered call steps (both ascending):
    ``furthest`` is the last response step of any call before the start.
    """
    calls = sorted(reach)
    safe: list[int] = []
    furthest = -1
    next_call = 0
    count = len(calls)
    for start in starts:
        while next_call < count and calls[next_call] < start:
            last = reach[calls[next_call]]
            if last > furthest:
                furthest = last
            next_call += 1
        if furthest < start:
            safe.append(start)
    return safe


def _closure_end(reach: dict[int, int], length: int, total: int) -> int:
    """Extends the first ``length`` of ``total`` contents to the end of the cycles they open.

    ``reach`` maps each content holding answered calls to its last response.
    """
    if length <= 0:
        return 0
    end = min(length, total)
    furthest = -1
    index = 0
    while index < end:
        last = reach.get(index, -1)
        if last > furthest:
            furthest = last
        index += 1
        if index == end and furthest >= end:
            end = min(furthest + 1, total)
    return end


def _is_human(content: types.Content) -> bool:
    """A user-role content holding no function response (a person typed it)."""
    if content.role != "user":
        return False
    return not any(part.function_response is not None for part in content.parts or ())


def tail_cut(contents: Sequence[types.Content], keep: int, hysteresis: int) -> int | None:
    """The count-mode cut, found from the end without pairing the whole history.

    Walks back only until ``keep + hysteresis`` invocation starts are seen, then
    pairs the kept tail alone. If the tail pairs with no orphan, no kept
    response belongs to a dropped call, so the cut at the start of the
    ``keep``-th newest invocation is safe: the same answer :func:`full_trim`
    gives, in time proportional to the tail.

    A response orphaned in the tail whose call is further back (a long-running
    tool answered invocations later) belongs, in the whole history, to the
    newest call before the cut with its id (or, id-less, its name): nothing in
    the tail before it could claim it. Every start from that call's position to
    the response is unsafe, so the cut widens to the invocation start at or
    before the call, and the longer tail is paired again. An orphan with no
    call before the cut is orphaned in the whole history too and constrains
    nothing. Returns ``None``, leaving the full pass to decide, after a few
    widenings.
    """
    starts: list[int] = []
    index = len(contents) - 1
    human_after = False
    while index >= 0 and len(starts) < keep + hysteresis:
        human = _is_human(contents[index])
        if human_after and not human:
            starts.append(index + 1)
        human_after = human
        index -= 1
    if index < 0 and human_after:
        starts.append(0)
    if len(starts) < keep + hysteresis:
        return 0
    cut = starts[keep - 1]
    steps = [content_step(content) for content in contents[cut:]]
    for _widening in range(_MAX_WIDENINGS):
        orphans = pair(steps, idless="positional").orphans
        if not orphans:
            return cut
        call = _newest_calls_before(contents, cut, orphans)
        if call is None:  # orphaned in the whole history too
            return cut
        wider = _invocation_start_at_or_before(contents, call)
        steps[:0] = [content_step(content) for content in contents[wider:cut]]
        cut = wider
    return None


_MAX_WIDENINGS = 4
"""Tail pairings :func:`tail_cut` tries before leaving the cut to the full pass."""


def _newest_calls_before(contents: Sequence[types.Content], cut: int,
                         orphans: Sequence[OrphanedResponse]) -> int | None:
    """The oldest of the newest calls before ``cut`` that claim an orphan of the tail.

    An orphan no call before ``cut`` claims is orphaned in the whole history:
    it belongs to no call, so it makes no cut unsafe. ``None`` when no orphan
    is claimed.
    """
    ids = {o.id for o in orphans if o.id}
    names = {o.name for o in orphans if not o.id}
    oldest = None
    index = cut - 1
    while index >= 0 and (ids or names):
        for call_id, name in content_step(contents[index])[0]:
            if call_id and call_id in ids:
                ids.discard(call_id)
                oldest = index
            elif not call_id and name in names:
                names.discard(name)
                oldest = index
        index -= 1
    return oldest


def _invocation_start_at_or_before(contents: Sequence[types.Content], position: int) -> int:
    """The newest invocation start at or before ``position`` (0 if there is none)."""
    index = position
    while index >= 0 and not _is_human(contents[index]):
        index -= 1
    while index > 0 and _is_human(contents[index - 1]):
        index -= 1
    return max(index, 0)


def trim(contents: Sequence[types.Content], window: ContextWindow) -> list[types.Content]:
    """Returns the contents the window keeps, before any custom filter (a new list)."""
    keep = window.num_invocations_to_keep
    if keep is None and window.budget is None:
        return list(contents)
    prefix = window.protected_prefix
    if keep is not None and window.budget is None:
        fast = tail_cut(contents, keep, window.hysteresis)
        if fast is not None:
            closed = _closed_before(contents, min(prefix, len(contents)), fast)
            return list(contents) if fast <= closed else [*contents[:closed], *contents[fast:]]
    return full_trim(contents, window)


def _closed_before(contents: Sequence[types.Content], prefix: int, cut: int) -> int:
    """The protected prefix extended to the end of the tool cycles it opens, below a safe cut.

    ``cut`` is safe: no response at or after it belongs to a call before it.
    So every response of a call before ``cut`` lies before it, and pairing
    ``contents[:cut]`` alone attributes them as pairing the whole history
    would (an attribution depends only on what precedes a response): the
    closure is :func:`_closure_end`'s, as in :func:`full_trim`.

    Returns:
        The closure's end (exclusive); ``prefix`` when the prefix opens no
        cycle, or when ``cut <= prefix``.
    """
    if not prefix or cut <= prefix:
        return prefix
    if not any(calls for calls, _ in content_steps(contents[:prefix])[0]):
        return prefix  # closes on itself: nothing more is read
    steps, _ = content_steps(contents[:cut])
    reach = {call: response for call, response in response_owners(steps)}
    return _closure_end(reach, prefix, cut)


def full_trim(contents: Sequence[types.Content], window: ContextWindow) -> list[types.Content]:
    """The trim from one pass over every content plus a full pairing."""
    keep = window.num_invocations_to_keep
    shape = _shape(contents)
    starts, safe = shape.starts, shape.safe
    cut = 0
    if keep is not None and len(starts) >= keep + window.hysteresis:
        target = starts[-keep]
        position = bisect_right(safe, target)
        cut = safe[position - 1] if position else 0
    prefix = _closure_end(shape.reach, window.protected_prefix, len(contents))
    if window.budget is not None:
        sizes = [window.counter(c) for c in contents]
        prefix_size = sum(sizes[:prefix])
        suffix = 0
        sizes_from: dict[int, int] = {}
        position = len(contents)
        for start in reversed(safe):
            suffix += sum(sizes[start:position])
            position = start
            sizes_from[start] = suffix
        best = None
        for start in reversed(safe):
            if start < cut:
                break
            if best is not None and prefix_size + sizes_from[start] > window.budget:
                break
            best = start
        if best is not None and best > cut:
            cut = best
    if cut <= prefix:
        return list(contents)
    return [*contents[:prefix], *contents[cut:]]
