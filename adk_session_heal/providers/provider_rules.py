"""Each provider's sequencing rule for tool calls and their results, stated once.

A request is read as *steps* (see :mod:`adk_session_heal.core.pairing`): one per
Chat Completions message, Responses API item, Anthropic turn or Gemini content.
Results are attributed to calls by :func:`~adk_session_heal.core.pairing.pair`
(id-less ones positionally, as Gemini does). A provider's rule then says where
a call's result must sit and how turns may follow each other:

* OpenAI Chat (:func:`openai_chat_verdict`): every ``tool`` message answers a
  ``tool_calls`` id of the assistant message right before its run of ``tool``
  messages; every call is answered in that run, before any other message.
* OpenAI Responses (:func:`openai_responses_verdict`): every
  ``function_call`` has a later ``function_call_output``, and every output a
  call before it.
* Anthropic (:func:`anthropic_verdict`): consecutive messages of one role are
  merged into one turn (:func:`anthropic_turns`); each ``tool_use`` has exactly
  one ``tool_result`` in the very next turn, and a turn's ``tool_result`` blocks
  come before any other block of it (:func:`anthropic_results_not_first`).
* Gemini (:func:`gemini_verdict`): a function-call turn comes right after a
  user or function-response turn (:func:`call_turn_in_order`); the turn right
  after it holds its responses, as many response parts as call parts.

Some calls no provider accepts wherever their results sit
(:func:`repeated_call_ids`): two calls of one turn carrying one id. Anthropic
refuses the second ``tool_use`` ("``tool_use`` ids must be unique"), OpenAI
Chat the second ``tool`` message answering that id ("Duplicate value for
'tool_call_id'"), whichever call each answers. Classification reports such
calls instead of healing them (``malformed`` in
:mod:`adk_session_heal.core.findings`, with calls that have no name, which ADK's
LiteLlm adapter refuses before anything is sent).

Independently of tool calls, some provider paths want strictly alternating
roles (:func:`alternation_roles`, :func:`same_role_repeats`): Amazon Bedrock's
Converse API rejects two consecutive messages of one role ("A conversation must
alternate between user and assistant roles"), where a tool result is a user
turn, and (as reported for Claude and Llama models there) a user turn holding
both tool results and text ("Conversation blocks and tool result blocks cannot
be provided in the same turn", :func:`mixed_result_turns`). The Anthropic
Messages API merges consecutive same-role messages instead, so a healed history
(call, heal, then the next user message: two user messages) is accepted there
and breaks only the strict reading. These rules are checked on request
(``strict_alternation=True`` in the validators), never as part of
:func:`whole`.

ADK request contents may go to any of these, so a call in them is only
:func:`whole` (under :func:`contents_verdict`) when it is answered exactly
once, in the next content, and its turn is in Gemini's order: Gemini's rule
with Anthropic's one result per call, which implies both OpenAI rules for
contents rendered as ADK renders them.

The validators turn a :class:`Verdict` into the providers' error texts; the
request repairer (:mod:`adk_session_heal.providers.request_repair`), the context filter
plugin and :func:`adk_session_heal.testing.unpaired_tool_calls` act on it. No
other module states a rule. The module is pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from google.genai import types

from ..core.event_access import content_step, json_content_step
from ..core.pairing import EMPTY_STEP, Pairing, Ref, Step, pair, repeated_ids

Provider = Literal["openai_chat", "openai_responses", "anthropic", "gemini"]
"""A provider request format with a rule here."""

PROVIDERS: tuple[Provider, ...] = ("openai_chat", "openai_responses", "anthropic", "gemini")
"""Every provider format, in a stable order."""

AnthropicBlock = tuple[int, int, Mapping[str, Any]]
"""A tool block of a turn: (message index, block index, block)."""

GeminiContent = types.Content | Mapping[str, Any]
"""A Gemini content: a ``types.Content`` or its dict (snake or camel case)."""

AlternationRole = Literal["user", "assistant"]
"""A message's side under strict alternation (tool results are ``user``)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """Where a request's calls and results stand under one provider's rule.

    Attributes:
        steps: The request read as steps.
        pairing: ``pair(steps, idless="positional")``.
        ends: A call at step ``s`` must be answered at a step ``r`` with
            ``s < r < ends[s]`` (the rule's *answer window*).
        answers: Per call occurrence (``pairing.occurrences`` order), the step
            of its answer (its first result in the window), or ``-1``.
        duplicates: ``(occurrence index, step)`` of each further result in the
            window.
        misplaced: ``(occurrence index, step)`` of each result outside it.
        out_of_order: Steps of call turns that break the turn order (Gemini).
    """

    steps: Sequence[Step]
    pairing: Pairing
    ends: Sequence[int]
    answers: list[int]
    duplicates: list[tuple[int, int]]
    misplaced: list[tuple[int, int]]
    out_of_order: frozenset[int] = frozenset()


def _judge(steps: Sequence[Step], ends: Sequence[int]) -> Verdict:
    """Sorts every attributed result into answer, duplicate or misplaced."""
    pairing = pair(steps, idless="positional")
    answers: list[int] = []
    duplicates: list[tuple[int, int]] = []
    misplaced: list[tuple[int, int]] = []
    for index, occurrence in enumerate(pairing.occurrences):
        end = ends[occurrence.step]
        responses = occurrence.responses  # always after the call's step
        if len(responses) == 1 and responses[0] < end:  # the usual case
            answers.append(responses[0])
            continue
        answer = -1
        for response in responses:
            if response >= end:
                misplaced.append((index, response))
            elif answer < 0:
                answer = response
            else:
                duplicates.append((index, response))
        answers.append(answer)
    return Verdict(steps, pairing, ends, answers, duplicates, misplaced)


def whole(verdict: Verdict) -> list[bool]:
    """Per call occurrence: answered exactly once in its window, nothing elsewhere, in order.

    The strictest reading of a rule; over :func:`contents_verdict`, what every
    provider accepts of ADK contents.
    """
    result = [answer >= 0 for answer in verdict.answers]
    for index, _step in verdict.duplicates:
        result[index] = False
    for index, _step in verdict.misplaced:
        result[index] = False
    if verdict.out_of_order:
        for index, occurrence in enumerate(verdict.pairing.occurrences):
            if occurrence.step in verdict.out_of_order:
                result[index] = False
    return result


def repeated_call_ids(steps: Sequence[Step]) -> list[tuple[int, str]]:
    """``(step, id)`` for each id that two or more calls of one step carry, in order.

    Such calls are refused however they are answered (see the module
    docstring); :func:`~adk_session_heal.core.pairing.repeated_ids` finds them in
    one step.
    """
    found: list[tuple[int, str]] = []
    for index, (calls, _results) in enumerate(steps):
        if len(calls) > 1:
            found.extend((index, call_id) for call_id in sorted(repeated_ids(calls)))
    return found


# -- OpenAI Chat Completions -------------------------------------------------------


def openai_chat_steps(messages: Sequence[Mapping[str, Any]]) -> list[Step]:
    """Returns one pairing step per Chat Completions message."""
    steps: list[Step] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            calls: list[Ref] = []
            for call in message["tool_calls"]:
                function = call.get("function") or {}
                calls.append((call.get("id") or None, function.get("name") or ""))
            steps.append((calls, ()))
        elif role == "tool":
            steps.append(((), [(message.get("tool_call_id") or None, message.get("name") or "")]))
        else:
            steps.append(EMPTY_STEP)
    return steps


def openai_chat_verdict(messages: Sequence[Mapping[str, Any]]) -> Verdict:
    """OpenAI Chat's rule: a call is answered in the run of ``tool`` messages after it."""
    ends = [0] * len(messages)  # for each index, the end of the run of tool messages after it
    end = len(messages)
    for index in range(len(messages) - 1, -1, -1):
        ends[index] = end
        if messages[index].get("role") != "tool":
            end = index
    return _judge(openai_chat_steps(messages), ends)


# -- OpenAI Responses --------------------------------------------------------------


def openai_responses_steps(items: Sequence[Mapping[str, Any]]) -> list[Step]:
    """Returns one pairing step per Responses API ``input`` item.

    A run of consecutive ``function_call`` items (one model turn's parallel
    calls) is one step, held by the run's first item (the others get
    :data:`EMPTY_STEP`), so calls of that turn that share an id each get their
    own output; the item of a call is its step plus its position.
    """
    steps: list[Step] = []
    run: list[Ref] | None = None
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            ref = (item.get("call_id") or None, item.get("name") or "")
            if run is None:
                run = [ref]
                steps.append((run, ()))
            else:
                run.append(ref)
                steps.append(EMPTY_STEP)
            continue
        run = None
        if kind == "function_call_output":
            steps.append(((), [(item.get("call_id") or None, "")]))
        else:
            steps.append(EMPTY_STEP)
    return steps


def openai_responses_verdict(items: Sequence[Mapping[str, Any]]) -> Verdict:
    """OpenAI Responses' rule: a call is answered anywhere after it."""
    return _judge(openai_responses_steps(items), [len(items)] * len(items))


# -- Anthropic Messages ------------------------------------------------------------


def anthropic_turns(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[int], list[list[AnthropicBlock]], list[Step]]:
    """Merges consecutive same-role messages into turns, as the Messages API does.

    Returns:
        ``(turn_first, turn_blocks, steps)``: the index of each turn's first
        message, each turn's ``tool_use`` / ``tool_result`` blocks with where
        they came from, and one pairing step per turn.
    """
    turn_first: list[int] = []
    turn_blocks: list[list[AnthropicBlock]] = []
    previous_role: object = object()
    for index, message in enumerate(messages):
        role = message.get("role")
        if role != previous_role:
            turn_first.append(index)
            turn_blocks.append([])
            previous_role = role
        content = message.get("content")
        for position, block in enumerate(content if isinstance(content, list) else ()):
            if isinstance(block, Mapping) and block.get("type") in ("tool_use", "tool_result"):
                turn_blocks[-1].append((index, position, block))
    steps: list[Step] = []
    for blocks in turn_blocks:
        calls = [(b.get("id") or None, b.get("name") or "") for _, _, b in blocks
                 if b.get("type") == "tool_use"]
        results = [(b.get("tool_use_id") or None, "") for _, _, b in blocks
                   if b.get("type") == "tool_result"]
        steps.append((calls, results) if calls or results else EMPTY_STEP)
    return turn_first, turn_blocks, steps


def anthropic_results_not_first(
    messages: Sequence[Mapping[str, Any]], turn_first: Sequence[int]
) -> list[tuple[int, list[str]]]:
    """Finds ``tool_result`` blocks that follow another block of their merged turn.

    The Messages API wants a turn's results at its beginning ("Did not find 1
    ``tool_result`` block(s) at the beginning of this message"), also after it
    merged consecutive user messages: a user text stored before a function
    response makes the response late.

    Args:
        messages: The messages, as plain dicts.
        turn_first: Each merged turn's first message, from :func:`anthropic_turns`.

    Returns:
        ``(index of the turn's first message, result ids after another block)``
        for each turn that has such results, in order.
    """
    found: list[tuple[int, list[str]]] = []
    for turn, first in enumerate(turn_first):
        end = turn_first[turn + 1] if turn + 1 < len(turn_first) else len(messages)
        other_seen = False
        late: list[str] = []
        for message in messages[first:end]:
            content = message.get("content")
            for block in content if isinstance(content, list) else ({"type": "text"},):
                if isinstance(block, Mapping) and block.get("type") == "tool_result":
                    if other_seen:
                        late.append(str(block.get("tool_use_id") or ""))
                else:
                    other_seen = True
        if late:
            found.append((first, late))
    return found


def anthropic_verdict(turn_steps: Sequence[Step]) -> Verdict:
    """Anthropic's rule, over the steps of merged turns: answered in the very next turn."""
    return _judge(turn_steps, range(2, len(turn_steps) + 2))


# -- Gemini ------------------------------------------------------------------------


def gemini_steps(contents: Sequence[GeminiContent]) -> tuple[list[Step], list[str]]:
    """Returns the pairing steps and the roles of Gemini contents.

    Args:
        contents: ``types.Content`` objects or their dicts (snake or camel case).

    Returns:
        ``(steps, roles)``, one entry per content.
    """
    steps: list[Step] = []
    roles: list[str] = []
    for content in contents:
        if isinstance(content, types.Content):
            roles.append(content.role or "")
            steps.append(content_step(content))
        else:
            roles.append(content.get("role") or "")
            steps.append(json_content_step(content))
    return steps, roles


def call_turn_in_order(previous_role: str | None) -> bool:
    """Whether a function-call turn may follow a turn of this role (``None``: no turn).

    Gemini: "function call turn comes immediately after a user turn or after a
    function response turn"; both are role ``user`` in ADK's contents.
    """
    return previous_role == "user"


def gemini_verdict(steps: Sequence[Step], roles: Sequence[str]) -> Verdict:
    """Gemini's rule: answered in the next content; call turns after a user turn.

    Args:
        steps: One step per content (see :func:`gemini_steps`).
        roles: The role of each content.
    """
    verdict = _judge(steps, range(2, len(steps) + 2))
    out_of_order: set[int] = set()
    previous = -1
    for occurrence in verdict.pairing.occurrences:
        step = occurrence.step
        if step != previous:
            previous = step
            if not call_turn_in_order(roles[step - 1] if step else None):
                out_of_order.add(step)
    return replace(verdict, out_of_order=frozenset(out_of_order)) if out_of_order else verdict


def contents_verdict(contents: Sequence[GeminiContent]) -> Verdict:
    """Gemini's verdict on contents: ``gemini_verdict(*gemini_steps(contents))``.

    Also the rule for ADK request contents, whatever the model: a call there is
    acceptable to every provider when :func:`whole` says so.
    """
    return gemini_verdict(*gemini_steps(contents))


def gemini_miscounted(verdict: Verdict) -> list[int]:
    """Call steps whose next turn does not hold one response part per call part.

    Counts parts, as Gemini does: the turn after a call turn must hold as many
    responses as it has calls, all attributed to that call turn. A call turn
    that ends the history has no next turn, so it is miscounted.
    """
    occurrences = verdict.pairing.occurrences
    calls: dict[int, int] = {}  # call step -> calls there, less the answers found next
    for occurrence, answer in zip(occurrences, verdict.answers, strict=True):
        step = occurrence.step
        calls[step] = calls.get(step, 0) + (0 if answer >= 0 else 1)
    for index, _response in verdict.duplicates:
        step = occurrences[index].step
        calls[step] -= 1
    steps = verdict.steps
    last = len(steps) - 1
    return [step for step, missing in calls.items()
            if missing or (len(steps[step + 1][1]) if step < last else 0)
            != len(steps[step][0])]


# -- strict role alternation (Bedrock Converse) -------------------------------------

_USER_SIDE = frozenset({"user", "tool", "function"})
_ASSISTANT_SIDE = frozenset({"assistant", "model"})


def _side(role: object) -> AlternationRole | None:
    if role in _USER_SIDE:
        return "user"
    if role in _ASSISTANT_SIDE:
        return "assistant"
    return None


def alternation_roles(
    messages: Sequence[Any], provider: Provider
) -> list[AlternationRole | None]:
    """Each message's side, as a strictly alternating API counts it.

    Tool results are user turns (Chat ``tool`` messages, Responses
    ``function_call_output`` items, Anthropic ``tool_result`` blocks, which sit
    in user messages, and Gemini function responses, role ``user``); calls are
    assistant turns. ``None`` marks what is no turn of its own: ``system`` /
    ``developer`` messages (such APIs take them apart) and, in the OpenAI
    formats, a ``tool`` message, ``function_call`` or ``function_call_output``
    item right after one of its kind (one turn's parallel calls or results
    form one message once converted).

    Args:
        messages: The provider-format list (messages, items or contents).
        provider: Which format it is.

    Returns:
        One entry per message.
    """
    roles: list[AlternationRole | None] = []
    previous_kind: object = None
    for message in messages:
        kind = None if isinstance(message, types.Content) else (
            message.get("role") if provider == "openai_chat" else message.get("type"))
        if provider in ("openai_chat", "openai_responses") and kind == previous_kind and kind in (
                "tool", "function_call", "function_call_output"):
            roles.append(None)
            continue
        previous_kind = kind
        if isinstance(message, types.Content):
            roles.append("assistant" if message.role == "model" else "user")
        elif provider == "gemini":
            roles.append("assistant" if message.get("role") == "model" else "user")
        elif provider == "openai_responses" and kind not in (None, "message"):
            roles.append("user" if kind == "function_call_output"
                         else "assistant" if kind in ("function_call", "reasoning") else None)
        else:
            roles.append(_side(message.get("role")))
    return roles


def same_role_repeats(roles: Sequence[AlternationRole | None]) -> list[int]:
    """Indices of messages whose side is that of the turn before them.

    Strict alternation's rule: each such message is a violation (Bedrock
    Converse rejects the request); ``None`` entries are skipped.

    Args:
        roles: From :func:`alternation_roles`.
    """
    repeats: list[int] = []
    previous: AlternationRole | None = None
    for index, role in enumerate(roles):
        if role is None:
            continue
        if role == previous:
            repeats.append(index)
        previous = role
    return repeats


def mixed_result_turns(messages: Sequence[Any], provider: Provider) -> list[int]:
    """Indices of user turns holding both tool results and other content.

    Bedrock Converse wants a turn's tool results alone in it. Only formats
    where results sit inside messages can mix them: Anthropic (``tool_result``
    blocks beside other blocks) and Gemini contents (function responses beside
    other parts); in the OpenAI formats a result is a message or item of its
    own.

    Args:
        messages: The provider-format list.
        provider: Which format it is.
    """
    mixed: list[int] = []
    for index, message in enumerate(messages):
        if provider == "anthropic":
            content = message.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text"}]
            results = sum(isinstance(b, Mapping) and b.get("type") == "tool_result"
                          for b in blocks)
            others = len(blocks) - results
        elif provider == "gemini":
            steps, _roles = gemini_steps([message])
            parts = (message.parts if isinstance(message, types.Content)
                     else message.get("parts")) or ()
            results = len(steps[0][1])
            others = len(parts) - results
        else:
            continue
        if results and others:
            mixed.append(index)
    return mixed
