"""Completing a custom filter's choice of contents so that no tool call is split.

The window sends whole contents, never edited ones, so a choice of contents
(:mod:`~adk_session_heal.runtime.context_filter.matching`) is completed by content:

* A content holding a call is kept if and only if every content holding one of
  its responses is kept, wherever those sit (the same content, the next one,
  or several separate contents). Which response belongs to which call is
  :func:`~adk_session_heal.core.pairing.pair`'s decision (seen at content level:
  :func:`~adk_session_heal.core.pairing.response_owners`), over the contents the
  filter was given.
* A content holding calls is kept only with the content before it when that is
  a user-role content (Gemini's turn order: a call turn comes right after a
  user or function-response turn).
* The newest human message (a user content holding no function response) is
  always kept.

:func:`complete` either adds what the chosen contents need (``"widen"``) or
removes what needs a content the filter dropped (``"drop"``). Either way, a
call keeps all its responses and a response its call, so no call the filter
was given whole is sent broken. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ...core.pairing import Step
from ...providers.provider_rules import call_turn_in_order

Repair = Literal["widen", "drop"]
"""How a custom filter's choice is completed: see :func:`complete`."""


def newest_human(steps: Sequence[Step], roles: Sequence[str]) -> int:
    """The position of the newest user content holding no function response, or -1."""
    for index in range(len(steps) - 1, -1, -1):
        if roles[index] == "user" and not steps[index][1]:
            return index
    return -1


def complete(chosen: Sequence[bool], steps: Sequence[Step], roles: Sequence[str],
             owners: Sequence[tuple[int, int]], repair: Repair, keep: int = -1) -> list[bool]:
    """Completes a choice of contents so that every call goes with all its responses.

    Args:
        chosen: Per content, whether the filter kept it.
        steps: The call and response parts of each content.
        roles: The role of each content.
        owners: ``response_owners(steps)``: per attributed response, the
            content of its call and its own.
        repair: ``"widen"`` adds every content a kept one needs (a call's
            responses, a response's call and its siblings, the user turn
            before a call turn); ``"drop"`` removes every content that needs
            one the filter dropped.
        keep: A position kept whatever the filter chose (-1: none), with all
            it needs: the newest human message.

    Returns:
        Per content, whether it is sent.
    """
    needs = _needs(steps, roles, owners)
    kept = list(chosen)
    if keep >= 0:
        kept[keep] = True
    if repair == "widen":
        _add_needed(kept, needs, [i for i in needs if kept[i]])
        return kept
    needed_by: dict[int, list[int]] = {}
    for index, needed in needs.items():
        for other in needed:
            needed_by.setdefault(other, []).append(index)
    work = [i for i in needed_by if not kept[i]]
    while work:
        for other in needed_by.get(work.pop(), ()):
            if kept[other]:
                kept[other] = False
                work.append(other)
    if keep >= 0 and not kept[keep]:  # it held a call whose other half was dropped
        kept[keep] = True
        _add_needed(kept, needs, [keep])
    return kept


def _needs(steps: Sequence[Step], roles: Sequence[str],
           owners: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    """Per content holding calls or responses, the contents it cannot be sent without."""
    needs: dict[int, list[int]] = {}
    for step, (calls, _) in enumerate(steps):
        if calls and step > 0 and call_turn_in_order(roles[step - 1]):
            needs[step] = [step - 1]
    for call, response in owners:
        needs.setdefault(call, []).append(response)
        needs.setdefault(response, []).append(call)
    return needs


def _add_needed(kept: list[bool], needs: dict[int, list[int]], work: list[int]) -> None:
    """Marks kept everything the contents in ``work`` need, transitively."""
    while work:
        for other in needs.get(work.pop(), ()):
            if not kept[other]:
                kept[other] = True
                work.append(other)
