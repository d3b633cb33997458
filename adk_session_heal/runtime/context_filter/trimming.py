"""Where the context window starts: whole invocations, never a split tool cycle.

* An invocation starts at one or more consecutive human user contents (a
  function response content is role ``user`` but not human) and holds
  everything up to the next human content (ADK's definition).
* The window only ever starts at a *safe cut*: an invocation start after which
  no response belongs to a call before it (pairing is
  :func:`~adk_session_heal.core.pairing.pair`'s). A cut that is not safe widens back
  to the nearest safe one, so a tool cycle answered across invocations is kept
  whole (ADK-Java semantics, by invocation rather than by content, so the
  window still starts with a human message).

:func:`trim` finds the count-mode cut from the end (:func:`tail_cut`), widening
it over late answers by reading only what each widening takes in; beside a
protected prefix that opens tool cycles it then pairs only what lies below that
cut to close them (:func:`_closed_before`). A budget, or widenings that would
read more than a quarter of the history, make one pass over every content plus
a step-level pairing
(:func:`~adk_session_heal.core.pairing.response_owners`, :func:`full_trim`).
Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.genai import types

from ...core.event_access import content_step, content_steps
from ...core.pairing import Step, response_owners

if TYPE_CHECKING:
    from .window import ContextWindow


@dataclass(slots=True)
class _Shape:
    """What the trim needs to know about contents, from one pass plus pairing."""

    reach: dict[int, int]  # per content holding answered calls: its last response
    starts: list[int]  # invocation starts
    safe: list[int]  # invocation starts no response after which has its call before
    steps: list[Step]  # each content's calls and responses
    roles: list[str]  # each content's role


def _shape(contents: Sequence[types.Content]) -> _Shape:
    steps, roles = content_steps(contents)  # the one pass over every part
    humans = [index for index, role in enumerate(roles)
              if role == "user" and not steps[index][1]]
    starts = [index for position, index in enumerate(humans)
              if not position or humans[position - 1] != index - 1]
    # Responses come in history order: each call's last one is kept.
    reach = {call: response for call, response in response_owners(steps)}
    return _Shape(reach, starts, _safe_starts(starts, reach), steps, roles)


@dataclass(frozen=True, slots=True)
class Trimmed:
    """The contents a window keeps, and their parts when the trim read them all.

    Attributes:
        contents: The kept contents (a new list).
        steps: Their call and response parts, when the full pass read them
            (so the custom filter's check need not read them again); else ``None``.
        roles: Their roles, with ``steps``.
    """

    contents: list[types.Content]
    steps: list[Step] | None = None
    roles: list[str] | None = None


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

    Walks back only until ``keep + hysteresis`` invocation starts are seen,
    then reads the kept tail alone. A cut is safe when every response at or
    after it has a call with its id (an id-less one: an id-less call of its
    name) between the cut and itself: pairing attributes a response to the
    newest such call, so it then belongs to the tail. If every response of the
    tail does, the cut at the start of the ``keep``-th newest invocation is
    safe: the same answer :func:`full_trim` gives, in time proportional to the
    tail.

    A response of the tail without one (a long-running tool answered
    invocations later) belongs, in the whole history, to the newest call
    before the cut with its id (or name): nothing in the tail before it could
    claim it. Every start from that call to the response is unsafe, so the cut
    widens to the invocation start at or before the call. Only the contents
    the widening takes in are read: their unmatched responses join the open
    ones, and the calls among them close the open responses they match (they
    all precede the older tail). A response no call before the cut matches is
    unmatched in the whole history too and constrains nothing. The contents
    read are those the window keeps, plus the walks back to each widening's
    call. Once the widenings have read a quarter of the history, ``None``
    leaves the cut to the full pass, which reads everything once in one tight
    loop (cheaper by then than many small reads: measured, a chain of 1,200
    late answers widened back to the start took 2x the full pass).
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
    open_ids, open_names = _unmatched(contents, cut, len(contents))
    limit = len(contents) - cut + len(contents) // _WIDEN_SHARE
    while open_ids or open_names:
        call = _newest_calls_before(contents, cut, open_ids, open_names)
        if call is None:  # unmatched in the whole history too
            return cut
        wider = _invocation_start_at_or_before(contents, call)
        if len(contents) - wider > limit:
            return None
        new_ids, new_names = _unmatched(contents, wider, cut, open_ids, open_names)
        open_ids, open_names, cut = new_ids, new_names, wider
    return cut


_WIDEN_SHARE = 4
"""The widenings of :func:`tail_cut` read at most ``1 / _WIDEN_SHARE`` of the history."""


def _unmatched(contents: Sequence[types.Content], start: int, end: int,
               open_ids: set[str] | None = None,
               open_names: set[str] | None = None) -> tuple[set[str], set[str]]:
    """Reads ``contents[start:end]``: the responses still without a call after it.

    Returns the ids (and, for id-less responses, the names) of the responses
    in the range with no matching call before them in the range, plus those of
    ``open_ids`` / ``open_names`` (responses after ``end``) that no call in the
    range matches. Within a content, responses are read before its calls, as
    :func:`~adk_session_heal.core.pairing.pair` reads them.
    """
    ids: set[str] = set()
    names: set[str] = set()
    called: set[str] = set()
    called_names: set[str] = set()
    for calls, responses in content_steps(contents[start:end])[0]:
        for response_id, name in responses:
            if response_id:
                if response_id not in called:
                    ids.add(response_id)
            elif name not in called_names:
                names.add(name)
        for call_id, name in calls:
            if call_id:
                called.add(call_id)
            else:
                called_names.add(name)
    ids.update((open_ids or set()) - called)
    names.update((open_names or set()) - called_names)
    return ids, names


def _newest_calls_before(contents: Sequence[types.Content], cut: int,
                         open_ids: set[str], open_names: set[str]) -> int | None:
    """The oldest of the newest calls before ``cut`` that claim an open response of the tail.

    Drops from ``open_ids`` / ``open_names`` (in place) the responses no call
    before ``cut`` claims: they belong to no call in the whole history, so they
    make no cut unsafe. ``None`` when none is claimed.
    """
    ids, names = set(open_ids), set(open_names)
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
    open_ids -= ids
    open_names -= names
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
    return trim_read(contents, window).contents


def trim_read(contents: Sequence[types.Content], window: ContextWindow) -> Trimmed:
    """:func:`trim`, with the parts of the kept contents when the full pass read them."""
    keep = window.num_invocations_to_keep
    if keep is None and window.budget is None:
        return Trimmed(list(contents))
    prefix = window.protected_prefix
    if keep is not None and window.budget is None:
        fast = tail_cut(contents, keep, window.hysteresis)
        if fast is not None:
            closed = _closed_before(contents, min(prefix, len(contents)), fast)
            return Trimmed(list(contents) if fast <= closed
                           else [*contents[:closed], *contents[fast:]])
    return _full_trim(contents, window)


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
    return _full_trim(contents, window).contents


def _full_trim(contents: Sequence[types.Content], window: ContextWindow) -> Trimmed:
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
    steps, roles = shape.steps, shape.roles
    if cut <= prefix:
        return Trimmed(list(contents), steps, roles)
    return Trimmed([*contents[:prefix], *contents[cut:]], [*steps[:prefix], *steps[cut:]],
                   [*roles[:prefix], *roles[cut:]])
