"""Tool-aware trimming and repair of provider-format message lists (plain dicts).

For pipelines that hold OpenAI Chat Completions messages (LiteLLM users,
summarising filters) or Anthropic Messages API messages rather than ADK
contents. Every function is pure: it returns a new list and never modifies the
input or its dicts. Calls and results are attributed with
:func:`~adk_session_heal.core.pairing.pair`, by id, not by adjacency.

OpenAI Chat Completions:

* :func:`atomic_groups`: index ranges that must be kept or dropped together:
  an assistant message with ``tool_calls``, the ``tool`` messages answering it
  (wherever they are) and the assistant follow-up; chained tool rounds merge.
* :func:`align_tail_start`: moves a proposed cut back to the start of the group
  it falls in, never into a protected prefix.
* :func:`trim`: keeps the first ``keep_first`` and last ``keep_last`` messages,
  widened to whole groups.
* :func:`repair`: answers dangling calls with the healing policy's synthetic
  payload and drops results that answer no call of the message before them.

Anthropic Messages (consecutive same-role messages form one turn, as the API
merges them): :func:`anthropic_atomic_groups`,
:func:`anthropic_align_tail_start`, :func:`anthropic_trim`,
:func:`anthropic_repair`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .core.pairing import Step, pair
from .policy import HealPolicy
from .providers.provider_rules import anthropic_turns, openai_chat_steps
from .providers.request_repair import REPAIR_REASON, repair_anthropic, repair_openai_chat

__all__ = [
    "REPAIR_REASON",
    "align_tail_start",
    "anthropic_align_tail_start",
    "anthropic_atomic_groups",
    "anthropic_repair",
    "anthropic_trim",
    "atomic_groups",
    "repair",
    "trim",
]

Message = Mapping[str, Any]


# -- shared: groups over steps -----------------------------------------------------


def _groups(steps: Sequence[Step], follow_up: Sequence[bool]) -> list[range]:
    """Partitions positions into ranges no call/result pair crosses.

    A range holding a call extends to its last result, then takes in the next
    position when ``follow_up`` says it is the assistant's answer.
    """
    n = len(steps)
    reach = list(range(n))
    for occurrence in pair(steps, idless="positional").occurrences:
        for response in occurrence.responses:
            if response > reach[occurrence.step]:
                reach[occurrence.step] = response
    groups: list[range] = []
    start = 0
    while start < n:
        end = reach[start]
        index = start
        has_calls = bool(steps[start][0])
        while True:
            while index < end:
                index += 1
                end = max(end, reach[index])
                has_calls = has_calls or bool(steps[index][0])
            if has_calls and end + 1 < n and follow_up[end + 1]:
                end += 1
                end = max(end, reach[end])
                has_calls = has_calls or bool(steps[end][0])
                continue
            break
        groups.append(range(start, end + 1))
        start = end + 1
    return groups


def _align(groups: Sequence[range], start: int, protected_prefix: int) -> int:
    if not groups or start >= groups[-1].stop:
        return max(start, protected_prefix) if groups else start
    low, high = 0, len(groups) - 1
    while low < high:  # the group holding ``start``
        middle = (low + high) // 2
        if groups[middle].stop <= start:
            low = middle + 1
        else:
            high = middle
    return max(groups[low].start, protected_prefix)


def _trim(messages: Sequence[Message], groups: Sequence[range], keep_last: int,
          keep_first: int) -> list[Message]:
    if keep_last < 0 or keep_first < 0:
        raise ValueError("keep_last and keep_first must not be negative")
    n = len(messages)
    if keep_first + keep_last >= n:
        return list(messages)
    prefix_end = 0
    if keep_first:
        prefix_end = next(g.stop for g in groups if g.start <= keep_first - 1 < g.stop)
    tail = _align(groups, n - keep_last, prefix_end)
    return [*messages[:prefix_end], *messages[tail:]]


# -- OpenAI Chat Completions -------------------------------------------------------


def _openai_follow_ups(messages: Sequence[Message]) -> list[bool]:
    return [m.get("role") == "assistant" for m in messages]


def atomic_groups(messages: Sequence[Message]) -> list[range]:
    """Splits Chat Completions messages into groups to keep or drop whole.

    Args:
        messages: The messages, oldest first.

    Returns:
        Index ranges partitioning ``range(len(messages))``, in order.
    """
    return _groups(openai_chat_steps(messages), _openai_follow_ups(messages))


def align_tail_start(messages: Sequence[Message], start: int, protected_prefix: int = 0) -> int:
    """Moves a proposed cut back to the start of the group it falls in.

    Args:
        messages: The messages, oldest first.
        start: Proposed index of the first message of the kept tail.
        protected_prefix: Messages before this index are kept anyway (a system
            prompt, say); the result is never below it.

    Returns:
        An index no call/result pair straddles (other than into the prefix).
    """
    return _align(atomic_groups(messages), start, protected_prefix)


def trim(messages: Sequence[Message], keep_last: int, keep_first: int = 0) -> list[Message]:
    """Keeps the first and last messages, widened to whole groups.

    Args:
        messages: The messages, oldest first.
        keep_last: At least this many of the newest messages are kept.
        keep_first: At least this many of the oldest messages are kept.

    Returns:
        A new list (a subsequence of ``messages``).
    """
    return _trim(messages, atomic_groups(messages), keep_last, keep_first)


def repair(messages: Sequence[Message], policy: HealPolicy | None = None) -> list[Message]:
    """Makes every tool call answered and every tool message owned.

    Each ``tool_calls`` id of an assistant message without a ``tool`` message
    in the run right after it gets a synthetic one (content: the policy's
    payload as JSON, by default ``{"error": "Tool execution was
    interrupted."}``), placed at the end of that run. ``tool`` messages that
    answer no call of the assistant message before their run, or answer one
    twice, are dropped. The request-side repairer
    (:func:`~adk_session_heal.providers.request_repair.repair_openai_chat`) does the work.

    Args:
        messages: The messages, oldest first (not modified).
        policy: Supplies the synthetic payload (default: :class:`HealPolicy`).

    Returns:
        A new list.
    """
    return repair_openai_chat(messages, policy)


# -- Anthropic Messages ------------------------------------------------------------


def _anthropic_message_groups(messages: Sequence[Message]) -> list[range]:
    turn_first, _blocks, steps = anthropic_turns(messages)
    roles = [messages[first].get("role") for first in turn_first]
    turn_groups = _groups(steps, [role == "assistant" for role in roles])
    bounds = [*turn_first, len(messages)]
    return [range(bounds[g.start], bounds[g.stop]) for g in turn_groups]


def anthropic_atomic_groups(messages: Sequence[Message]) -> list[range]:
    """Splits Messages API messages into groups to keep or drop whole.

    Consecutive messages of one role are never split (the API merges them).

    Returns:
        Index ranges partitioning ``range(len(messages))``, in order.
    """
    return _anthropic_message_groups(messages)


def anthropic_align_tail_start(messages: Sequence[Message], start: int,
                               protected_prefix: int = 0) -> int:
    """Like :func:`align_tail_start`, for Messages API messages."""
    return _align(_anthropic_message_groups(messages), start, protected_prefix)


def anthropic_trim(messages: Sequence[Message], keep_last: int,
                   keep_first: int = 0) -> list[Message]:
    """Like :func:`trim`, for Messages API messages."""
    return _trim(messages, _anthropic_message_groups(messages), keep_last, keep_first)


def anthropic_repair(messages: Sequence[Message],
                     policy: HealPolicy | None = None) -> list[Message]:
    """Makes every ``tool_use`` answered in the next turn and every result owned.

    Like :func:`repair` (the same arguments, a new list), for Messages API
    messages. A ``tool_use`` with no ``tool_result`` in the next turn gets a
    synthetic one (``is_error: true``, the policy's payload as JSON), placed
    after the existing results of the next turn's first user message, or in a
    new user message when the next turn is not the user's. Results that answer
    no ``tool_use`` of the turn before, or answer one twice, are dropped; a
    message left without content is dropped. The request-side repairer
    (:func:`~adk_session_heal.providers.request_repair.repair_anthropic`) does the work.
    """
    return repair_anthropic(messages, policy)
