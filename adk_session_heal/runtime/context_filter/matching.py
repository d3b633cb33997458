"""Which of its input contents a custom filter kept: its output read back as positions.

The window never sends what a custom filter returns, only a subsequence of the
contents the filter was given, in their order. :func:`chosen_positions` reads
the filter's output as a choice of positions of its input:

* A returned content that *is* one of the given objects chooses its position.
  This is the usual case (slicing, dropping by a condition) and costs one
  dictionary look-up.
* Any other returned content is matched by equality (``==``, every field), so
  filters that return copies (``[c.model_copy(deep=True) for c in contents]``)
  work: it chooses the first equal, not yet chosen position after the
  previous match, else the first equal, not yet chosen one anywhere (copies
  returned out of order). A copy of a content already chosen chooses nothing
  new.
* A content equal to no given one (a summary the filter wrote, an edited copy)
  is the filter's own: it chooses nothing and is counted, so the window can
  log it. The request only ever holds contents it came with.

Positions, not objects, are what the filter chooses: the window sends the
given objects at the chosen positions, never the filter's copies. Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence

from google.genai import types

_Key = tuple[str | None, int, str | None, str | None, str | None]


def chosen_positions(given: Sequence[types.Content],
                     returned: Iterable[types.Content]) -> tuple[list[bool], int]:
    """Reads a custom filter's output as a choice of positions of its input.

    Args:
        given: The contents the filter was given.
        returned: What it returned.

    Returns:
        ``(chosen, foreign)``: per position of ``given``, whether the filter
        kept it, and how many returned contents match no given content.
    """
    chosen = [False] * len(given)
    where = {id(content): index for index, content in enumerate(given)}
    repeated = _repeated_objects(given) if len(where) < len(given) else None
    copies: _Copies | None = None
    foreign = 0
    cursor = 0
    for content in returned:
        index = where.get(id(content))  # an object given twice is picked below
        if index is not None and repeated is not None and id(content) in repeated:
            index = _pick(repeated[id(content)], chosen, cursor)
        if index is None:
            if copies is None:
                copies = _Copies(given)
            index = copies.find(content, chosen, cursor)
            if index is None:
                foreign += 1
                continue
        chosen[index] = True
        cursor = index + 1
    return chosen, foreign


def _repeated_objects(given: Sequence[types.Content]) -> dict[int, list[int]]:
    """The positions of each object that occurs more than once in ``given``."""
    positions: dict[int, list[int]] = {}
    for index, content in enumerate(given):
        positions.setdefault(id(content), []).append(index)
    return {key: found for key, found in positions.items() if len(found) > 1}


def _pick(candidates: list[int], chosen: list[bool], cursor: int,
          content: types.Content | None = None,
          given: Sequence[types.Content] = ()) -> int | None:
    """The first unchosen candidate from ``cursor`` on, else from the start.

    ``candidates`` are ascending positions. With ``content``, only those equal
    to it count. When every candidate that counts is chosen already, the first
    of them is returned (a repeat chooses nothing new); ``None`` when none counts.
    """
    start = bisect_left(candidates, cursor)
    repeat = None
    for index in (*candidates[start:], *candidates[:start]):
        if content is not None and given[index] != content:
            continue
        if not chosen[index]:
            return index
        if repeat is None:
            repeat = index
    return repeat


def _key(content: types.Content) -> _Key:
    """A cheap key equal for equal contents: role, part count, the first part's text and ids."""
    parts = content.parts or ()
    if not parts:
        return (content.role, 0, None, None, None)
    head = parts[0]
    call, response = head.function_call, head.function_response
    return (content.role, len(parts), head.text, call.id if call is not None else None,
            response.id if response is not None else None)


class _Copies:
    """Finds a given content equal to a returned one; the index is built on first use."""

    def __init__(self, given: Sequence[types.Content]) -> None:
        self._given = given
        self._by_key: dict[_Key, list[int]] = {}
        for index, content in enumerate(given):
            self._by_key.setdefault(_key(content), []).append(index)

    def find(self, content: types.Content, chosen: list[bool], cursor: int) -> int | None:
        """The position ``content`` chooses (see :func:`chosen_positions`), or ``None``."""
        candidates = self._by_key.get(_key(content))
        if candidates is None:
            return None
        return _pick(candidates, chosen, cursor, content, self._given)
