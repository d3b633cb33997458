"""The request-side repairer: one plan for every provider format.

A request whose calls and results break a provider's rule is repaired the same
way whatever its format, from that rule's
:class:`~adk_session_heal.providers.provider_rules.Verdict` (:func:`plan_request_fix`):

* A call's answer (its first result where the rule wants it) is kept; every
  other result (a duplicate, a misplaced or an orphaned one) is dropped.
* A call without an answer is answered by a synthetic result carrying the
  healing policy's payload (its :class:`~adk_session_heal.policy.DeadCall`
  reason is :data:`REPAIR_REASON`) or, when no answers are wanted, dropped.
* :class:`Pending` calls (long-running, awaiting a confirmation or a
  credential) and all their results are left as they are.
* Under Gemini's turn order, a call turn that would not come right after a user
  turn once the turns before it are repaired loses its calls and their answers.

For providers that want strictly alternating roles (Bedrock Converse, see
:func:`~adk_session_heal.providers.provider_rules.same_role_repeats`),
:func:`merge_same_role_contents` merges consecutive contents of one role into
one, at request time only: a heal's tool result and the user message after it
become one user content.

Three writers put the plan back, copying only what changes and never
modifying their input: :func:`repair_contents` (ADK's Gemini-shaped contents,
for the context filter plugin), :func:`repair_openai_chat` and
:func:`repair_anthropic` (for :mod:`adk_session_heal.messages`). The module is
pure: no I/O.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from google.genai import types

from ..core.pairing import EMPTY_STEP, CallOccurrence, Ref
from ..policy import DeadCall, HealPolicy
from .provider_rules import (
    Verdict,
    alternation_roles,
    anthropic_turns,
    anthropic_verdict,
    call_turn_in_order,
    contents_verdict,
    openai_chat_verdict,
    same_role_repeats,
)

REPAIR_REASON = "unanswered"
"""The :attr:`DeadCall.reason` a payload function sees for a call answered in a request."""

Message = Mapping[str, Any]
Key = tuple[str | None, str]
"""What a result is matched by: its id, or its name when it has none."""

_DEFAULT_POLICY = HealPolicy()


def _key(call_id: str | None, name: str) -> Key:
    return (call_id, "") if call_id else (None, name)


@dataclass(frozen=True, slots=True)
class Pending:
    """Calls that are legitimately unanswered (never healed, dropped or repaired).

    Attributes:
        ids: Call ids awaiting their response.
        names: Tool names of those calls, for requests whose call ids ADK
            stripped (Gemini models get ``adk-`` ids removed).
    """

    ids: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()

    def covers(self, call_id: str | None, name: str) -> bool:
        """Whether a call of the request is one of these."""
        return call_id in self.ids if call_id else name in self.names


NOTHING_PENDING = Pending()
"""No pending calls (the default)."""


@dataclass(slots=True)
class RequestFix:
    """What a repair keeps, drops and answers, by step (see :func:`plan_request_fix`).

    Attributes:
        verdict: The verdict the plan was made from.
        pending: The calls it leaves alone.
        keep: Step -> how many results of each key to keep there (the first
            ones), for steps holding more than one result.
        kept: Step -> results kept there in all. The results kept are always
            among those attributed there, so a step keeping as many results as
            it holds keeps them all, and a step holding one result keeps it
            when ``kept`` is 1.
        drop_calls: Step -> positions (among the step's calls) of calls to drop.
        answer: Call step -> the calls to answer with a synthetic result.
    """

    verdict: Verdict
    pending: Pending
    keep: dict[int, dict[Key, int]] = field(default_factory=dict)
    kept: dict[int, int] = field(default_factory=dict)
    drop_calls: dict[int, set[int]] = field(default_factory=dict)
    answer: dict[int, list[CallOccurrence]] = field(default_factory=dict)

    def _keep(self, step: int, occurrence: CallOccurrence, count: int = 1) -> None:
        self.kept[step] = self.kept.get(step, 0) + count
        if len(self.verdict.steps[step][1]) > 1:
            budget = self.keep.setdefault(step, {})
            key = _key(occurrence.id, occurrence.name)
            budget[key] = budget.get(key, 0) + count

    def dropped_results(self, step: int, results: Sequence[Ref]) -> AbstractSet[int]:
        """Returns the positions, among the results of ``step``, of those dropped."""
        kept = self.kept.get(step, 0)
        if kept == len(results):
            return _NONE
        if len(results) == 1:
            return _FIRST
        budget = dict(self.keep.get(step) or {})
        dropped: set[int] = set()
        for position, (call_id, name) in enumerate(results):
            key = _key(call_id, name)
            left = budget.get(key, 0)
            if left > 0:
                budget[key] = left - 1
            else:
                dropped.add(position)
        return dropped

    def withdraw(self, step: int) -> None:
        """Drops the (not pending) calls of ``step`` and their answers; answers none."""
        occurrences = self.verdict.pairing.occurrences
        drop = self.drop_calls.setdefault(step, set())
        index = bisect_left(occurrences, step, key=lambda o: o.step)
        while index < len(occurrences) and occurrences[index].step == step:
            occurrence = occurrences[index]
            if not self.pending.covers(occurrence.id, occurrence.name):
                drop.add(occurrence.position)
                answer = self.verdict.answers[index]
                if answer >= 0:
                    self._keep(answer, occurrence, -1)
            index += 1
        self.answer.pop(step, None)


_NONE: AbstractSet[int] = frozenset()
_FIRST: AbstractSet[int] = frozenset((0,))


def plan_request_fix(verdict: Verdict, *, answer: bool,
                pending: Pending = NOTHING_PENDING) -> RequestFix:
    """Decides a repair from a rule's verdict.

    Args:
        verdict: The request's verdict under the provider's rule.
        answer: Answer calls that have no answer (``False``: drop them).
        pending: Calls to leave, with all their results, as they are.

    Returns:
        The plan; the turn order is the writer's to enforce, with
        :meth:`RequestFix.withdraw`, as it writes.
    """
    plan = RequestFix(verdict, pending)
    steps, kept = verdict.steps, plan.kept
    check_pending = bool(pending.ids or pending.names)
    for occurrence, found in zip(verdict.pairing.occurrences, verdict.answers, strict=True):
        if check_pending and pending.covers(occurrence.id, occurrence.name):
            for response in occurrence.responses:
                plan._keep(response, occurrence)
        elif found >= 0:
            if len(steps[found][1]) > 1:
                plan._keep(found, occurrence)
            else:  # the usual case, inlined
                kept[found] = kept.get(found, 0) + 1
        elif answer:
            plan.answer.setdefault(occurrence.step, []).append(occurrence)
        else:
            plan.drop_calls.setdefault(occurrence.step, set()).add(occurrence.position)
    return plan


def _payload(policy: HealPolicy | None, call: CallOccurrence) -> dict[str, Any]:
    return (policy or _DEFAULT_POLICY).payload_for(
        DeadCall(call.id or "", call.name, REPAIR_REASON))


# -- ADK contents (Gemini) -----------------------------------------------------------


def repair_contents(contents: Sequence[types.Content], policy: HealPolicy | None,
                    pending: Pending = NOTHING_PENDING) -> list[types.Content]:
    """Repairs ADK request contents so that every provider accepts them.

    Every call is answered exactly once, in the next content (a synthetic
    response is added to that content when it holds only responses, or a new
    user content right after the call otherwise), and every call content comes
    right after a user-role content.

    Args:
        contents: The contents, oldest first (not modified).
        policy: Supplies synthetic answers; ``None`` drops unanswered calls.
        pending: Calls to leave alone.

    Returns:
        A new list; unchanged contents are passed through, not copied.
    """
    verdict = contents_verdict(contents)
    steps = verdict.steps
    plan = plan_request_fix(verdict, answer=policy is not None, pending=pending)
    n = len(contents)
    result: list[types.Content] = []
    carried: dict[int, list[types.Part]] = {}  # synthetic answers for the next content
    for index, content in enumerate(contents):
        calls, responses = steps[index]
        extra = carried.pop(index, None)
        if not calls and not responses and extra is None:
            result.append(content)
            continue
        if calls and not call_turn_in_order(result[-1].role if result else None):
            plan.withdraw(index)
        drop = plan.drop_calls.get(index, _NONE)
        dropped = plan.dropped_results(index, responses) if responses else _NONE
        parts: list[types.Part] = []
        call_position = response_position = 0
        for part in content.parts or ():
            if part.function_call is not None:
                call_position += 1
                if call_position - 1 in drop:
                    continue
            elif part.function_response is not None:
                response_position += 1
                if response_position - 1 in dropped:
                    continue
            parts.append(part)
        if extra:
            parts.extend(extra)
        if extra or len(parts) != len(content.parts or ()):
            if parts:
                result.append(content.model_copy(update={"parts": parts}))
        else:
            result.append(content)
        heals = plan.answer.get(index)
        if heals:
            synthetic = [types.Part(function_response=types.FunctionResponse(
                id=call.id, name=call.name, response=_payload(policy, call))) for call in heals]
            following = steps[index + 1] if index + 1 < n else EMPTY_STEP
            if following[1] and not following[0]:
                carried[index + 1] = synthetic  # beside the siblings' responses
            else:
                result.append(types.Content(role="user", parts=synthetic))
    return result


def merge_same_role_contents(
    contents: Sequence[types.Content], *, bridge: str | None = None
) -> list[types.Content]:
    """Makes request contents alternate: each run of same-role contents becomes one turn.

    For a model path that sends one message per content to an API wanting
    strictly alternating roles: after a heal, ADK's request holds the heal's
    function responses and the next user message as two ``user`` contents.

    Without ``bridge``, a run is merged into one content; in a merged ``user``
    content the function responses come first, in order, then the other parts
    (Anthropic wants a turn's tool results first). Bedrock Converse rejects a
    turn mixing tool results and text, so for it pass ``bridge``: a ``user``
    run holding both stays two turns, the responses then the rest, with a
    ``model`` content holding ``bridge`` as its text between them (what
    LiteLLM's ``modify_params`` does for Bedrock with its continue message).

    Use it on a request's contents only (the plugin's
    ``strict_alternation=True`` does); stored events stay as they are. A single
    content that already mixes responses and text is left as it is.

    Args:
        contents: The contents, oldest first (not modified).
        bridge: The text of the model turn put between a run's tool results
            and its other parts (``None``: merge them into one turn).

    Returns:
        A new list; contents not merged are passed through, not copied.
    """
    repeats = set(same_role_repeats(alternation_roles(contents, "gemini")))
    if not repeats:
        return list(contents)
    runs: list[list[types.Content]] = []
    for index, content in enumerate(contents):
        if index in repeats:
            runs[-1].append(content)
        else:
            runs.append([content])
    result: list[types.Content] = []
    for run in runs:
        first = run[0]
        if len(run) == 1:
            result.append(first)
            continue
        parts = [part for content in run for part in content.parts or ()]
        if first.role == "model":
            result.append(first.model_copy(update={"parts": parts}))
            continue
        responses = [p for p in parts if p.function_response is not None]
        others = [p for p in parts if p.function_response is None]
        if bridge is None or not responses or not others:
            result.append(first.model_copy(update={"parts": responses + others}))
            continue
        result += [first.model_copy(update={"parts": responses}),
                   types.Content(role="model", parts=[types.Part(text=bridge)]),
                   types.Content(role=first.role, parts=others)]
    return result


# -- OpenAI Chat Completions ---------------------------------------------------------


def repair_openai_chat(messages: Sequence[Message],
                       policy: HealPolicy | None = None) -> list[Message]:
    """Repairs Chat Completions messages; see :func:`adk_session_heal.messages.repair`."""
    verdict = openai_chat_verdict(messages)
    plan = plan_request_fix(verdict, answer=True)
    after: dict[int, list[Message]] = {}  # at the end of the call's run of tool messages
    for step, calls in plan.answer.items():
        after.setdefault(verdict.ends[step] - 1, []).extend(
            {"role": "tool", "tool_call_id": call.id or "",
             "content": json.dumps(_payload(policy, call), default=str)} for call in calls)
    kept = plan.kept  # a tool message holds one result: kept when its step keeps one
    result: list[Message] = []
    for index, message in enumerate(messages):
        if not verdict.steps[index][1] or kept.get(index) == 1:
            result.append(message)
        if index in after:
            result.extend(after[index])
    return result


# -- Anthropic Messages --------------------------------------------------------------


def repair_anthropic(messages: Sequence[Message],
                     policy: HealPolicy | None = None) -> list[Message]:
    """Repairs Messages API messages; see :func:`adk_session_heal.messages.anthropic_repair`."""
    turn_first, turn_blocks, steps = anthropic_turns(messages)
    plan = plan_request_fix(anthropic_verdict(steps), answer=True)
    # Where synthetic blocks go: the next turn's first message if it is a user's.
    into: dict[int, list[dict[str, Any]]] = {}
    after: dict[int, list[dict[str, Any]]] = {}
    bounds = [*turn_first, len(messages)]
    for turn, calls in plan.answer.items():
        answers = [{"type": "tool_result", "tool_use_id": call.id or "", "is_error": True,
                    "content": json.dumps(_payload(policy, call), default=str)}
                   for call in calls]
        following = turn + 1
        if following < len(turn_first) and messages[turn_first[following]].get("role") == "user":
            into[turn_first[following]] = answers
        else:
            after[bounds[turn + 1] - 1] = answers
    drop_blocks: set[tuple[int, int]] = set()
    for turn, tool_blocks in enumerate(turn_blocks):
        results = [(index, position) for index, position, block in tool_blocks
                   if block.get("type") == "tool_result"]
        if results:
            dropped = plan.dropped_results(turn, steps[turn][1])
            drop_blocks.update(results[position] for position in dropped)
    touched = {index for index, _position in drop_blocks}
    result: list[Message] = []
    for index, message in enumerate(messages):
        added = into.get(index)
        content = message.get("content")
        if added is None and index not in touched:
            result.append(message)
        else:
            blocks_in = content if isinstance(content, list) else (
                [{"type": "text", "text": content}] if content else [])
            blocks = [b for p, b in enumerate(blocks_in) if (index, p) not in drop_blocks]
            if added:
                lead = 0
                while lead < len(blocks) and isinstance(blocks[lead], Mapping) and blocks[
                        lead].get("type") == "tool_result":
                    lead += 1
                blocks = [*blocks[:lead], *added, *blocks[lead:]]
            if blocks:
                result.append({**message, "content": blocks})
        if index in after:
            result.append({"role": "user", "content": after[index]})
    return result
