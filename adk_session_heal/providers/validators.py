"""Strict offline validators: would a provider reject this history, and why?

One validator per request format, each returning every :class:`Problem` it
finds, in history order, with the text the provider puts in its HTTP 400:

* :func:`validate_openai_chat`: Chat Completions ``messages`` (assistant
  ``tool_calls`` and ``tool`` messages).
* :func:`validate_openai_responses`: Responses API ``input`` items
  (``function_call`` / ``function_call_output``).
* :func:`validate_anthropic`: Messages API ``messages`` (``tool_use`` /
  ``tool_result`` blocks). Consecutive turns of one role are merged first, as
  the API does.
* :func:`validate_gemini`: ``contents`` (``google.genai.types.Content`` objects
  or their dicts, snake or camel case).
* :func:`validate_alternation`: strict role alternation over any of these
  formats, as Amazon Bedrock's Converse API wants it (no two consecutive
  messages of one role, tool results counted as user turns, and no user turn
  mixing tool results with text); on by
  ``strict_alternation=True`` in :func:`validate`, :func:`provider_problems`
  and :func:`adk_request_problems`. The Anthropic Messages API merges
  consecutive same-role messages instead, so :func:`validate_anthropic` does
  not apply it.

The rules themselves live in :mod:`adk_session_heal.providers.provider_rules` (which
pairs with :func:`~adk_session_heal.core.pairing.pair`, id-less calls positionally,
as Gemini does); a validator only turns a rule's verdict into the provider's
error texts. The step readers and ``PROVIDERS`` are re-exported from there for
compatibility. The checks are deliberately at least as strict as the providers: where a rule
is ours rather than documented provider behaviour (duplicate OpenAI results, a
Gemini history ending on an unanswered call turn), the problem says so with
``strict_only=True``.

:func:`provider_problems` converts a session (events, stored event JSON or ADK
contents) with :mod:`adk_session_heal.providers.formats` and validates it in one call:
that checks the **stored order**. What a model is sent can differ, because ADK
rearranges the history when it builds a request (a response stored after a
later turn is moved back right after its call, a dead call may be dropped):
:func:`adk_request_contents` builds the contents the way the installed ADK
does, with its own contents request processor, and :func:`adk_request_problems`
checks those (**the request as ADK builds it**). The module does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from google.genai import types

from .provider_rules import (
    PROVIDERS,
    AnthropicBlock,
    GeminiContent,
    Provider,
    alternation_roles,
    anthropic_results_not_first,
    anthropic_turns,
    anthropic_verdict,
    contents_verdict,
    gemini_miscounted,
    mixed_result_turns,
    openai_chat_verdict,
    openai_responses_verdict,
    repeated_call_ids,
    same_role_repeats,
)

if TYPE_CHECKING:
    from google.adk.agents import BaseAgent
    from google.adk.sessions import Session

ProblemCode = Literal[
    "unanswered_call", "orphaned_result", "duplicate_result", "turn_order", "count_mismatch",
    "result_not_first", "role_alternation", "mixed_result_turn", "duplicate_call_id",
]

OPENAI_UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding "
    "to each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)
OPENAI_ORPHANED = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
    "message with 'tool_calls'."
)
OPENAI_DUPLICATE_ID = (
    "Invalid parameter: Duplicate value for 'tool_call_id' of '{id}', in messages[{first}] "
    "and messages[{second}]."
)
RESPONSES_UNANSWERED = "No tool output found for function call {id}."
RESPONSES_ORPHANED = "No tool call found for function call output with call_id {id}."
ANTHROPIC_UNANSWERED = (
    "messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately "
    "after: {ids}. Each `tool_use` block must have a corresponding `tool_result` block in "
    "the next message."
)
ANTHROPIC_ORPHANED = (
    "messages.{index}.content.{block}: unexpected `tool_use_id` found in `tool_result` "
    "blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in "
    "the previous message."
)
ANTHROPIC_NOT_FIRST = (
    "messages.{index}: Did not find {count} `tool_result` block(s) at the beginning of this "
    "message. Messages following `tool_use` blocks must begin with a matching number of "
    "`tool_result` blocks."
)
ANTHROPIC_DUPLICATE_ID = "messages.{index}.content.{block}: `tool_use` ids must be unique"
ANTHROPIC_DUPLICATE = (
    "messages.{index}.content.{block}: each tool_use must have a single result. Found "
    "multiple `tool_result` blocks with id: {id}"
)
STRICT_ALTERNATION = (
    "A conversation must alternate between user and assistant roles. Make sure the "
    "conversation alternates between user and assistant roles and try again."
)
"""Amazon Bedrock Converse's text for two consecutive messages of one role."""
MIXED_RESULT_TURN = (
    "messages.{index}.content: Conversation blocks and tool result blocks cannot be "
    "provided in the same turn."
)
"""Amazon Bedrock Converse's text for a user turn mixing tool results and text."""
GEMINI_CALL_ORDER = (
    "Please ensure that function call turn comes immediately after a user turn or after a "
    "function response turn."
)
GEMINI_RESPONSE_ORDER = (
    "Please ensure that function response turn comes immediately after a function call turn."
)
GEMINI_COUNT = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a provider would reject a history.

    Attributes:
        provider: The format checked.
        code: What is wrong: ``unanswered_call``, ``orphaned_result``,
            ``duplicate_result``, ``turn_order``, ``count_mismatch`` or
            ``result_not_first`` (Anthropic: a result after another block of
            its turn), ``duplicate_call_id`` (two calls of one turn carry one
            id: Anthropic refuses the second ``tool_use``, OpenAI Chat the
            second ``tool`` message with that id), ``role_alternation``
            (strict alternation: a message of the same role as the one
            before it) or ``mixed_result_turn``
            (strict alternation: tool results and text in one user turn).
        index: Position of the offending message, item or content in the list
            that was checked.
        message: The provider's own error text (formatted as it would send it).
        ids: The call ids involved (``""`` for an id-less call).
        strict_only: ``True`` when this validator is stricter than the
            provider's documented behaviour on this point.
    """

    provider: Provider
    code: ProblemCode
    index: int
    message: str
    ids: tuple[str, ...] = ()
    strict_only: bool = False


# -- OpenAI Chat Completions ---------------------------------------------------


def validate_openai_chat(messages: Sequence[Mapping[str, Any]]) -> list[Problem]:
    """Checks a Chat Completions ``messages`` list.

    Every ``tool_calls`` id of an assistant message must be answered by one of
    the ``tool`` messages directly after it, and every ``tool`` message must
    answer a call of the assistant message right before its run of tool
    messages (:func:`~adk_session_heal.providers.provider_rules.openai_chat_verdict`).

    Args:
        messages: The messages, as plain dicts.

    Returns:
        The problems, ordered by index.
    """
    verdict = openai_chat_verdict(messages)
    occurrences = verdict.pairing.occurrences
    problems: list[Problem] = []
    unanswered: dict[int, list[str]] = {}
    for occurrence, answer in zip(occurrences, verdict.answers, strict=True):
        if answer < 0:
            unanswered.setdefault(occurrence.step, []).append(occurrence.id or "")
    misplaced = {o.step for o in verdict.pairing.orphans}
    misplaced.update(step for _index, step in verdict.misplaced)
    duplicates = {step: occurrences[index].id or "" for index, step in verdict.duplicates}
    for step, ids in unanswered.items():
        problems.append(Problem("openai_chat", "unanswered_call", step,
                                OPENAI_UNANSWERED.format(ids=", ".join(ids)), tuple(ids)))
    for step in misplaced:
        call_id = messages[step].get("tool_call_id") or ""
        problems.append(Problem("openai_chat", "orphaned_result", step, OPENAI_ORPHANED,
                                (call_id,)))
    for step, call_id in duplicates.items():
        problems.append(Problem(
            "openai_chat", "duplicate_result", step,
            f"Duplicate tool message for tool_call_id {call_id!r}.", (call_id,),
            strict_only=True))
    for step, call_id in repeated_call_ids(verdict.steps):
        answers = [i for i in range(step + 1, verdict.ends[step])
                   if messages[i].get("tool_call_id") == call_id]
        if len(answers) > 1:  # answered fewer times, a call is reported unanswered above
            problems.append(Problem(
                "openai_chat", "duplicate_call_id", answers[1],
                OPENAI_DUPLICATE_ID.format(id=call_id, first=answers[0], second=answers[1]),
                (call_id,)))
    problems.sort(key=lambda p: p.index)
    return problems


# -- OpenAI Responses ------------------------------------------------------------


def validate_openai_responses(items: Sequence[Mapping[str, Any]]) -> list[Problem]:
    """Checks a Responses API ``input`` list.

    Every ``function_call`` item needs a later ``function_call_output`` with its
    ``call_id``, and every output a call before it
    (:func:`~adk_session_heal.providers.provider_rules.openai_responses_verdict`).

    Args:
        items: The input items, as plain dicts.

    Returns:
        The problems, ordered by index.
    """
    verdict = openai_responses_verdict(items)
    occurrences = verdict.pairing.occurrences
    problems: list[Problem] = []
    for occurrence, answer in zip(occurrences, verdict.answers, strict=True):
        if answer < 0:
            call_id = occurrence.id or ""
            item = occurrence.step + occurrence.position  # a run of calls is one step
            problems.append(Problem("openai_responses", "unanswered_call", item,
                                    RESPONSES_UNANSWERED.format(id=call_id), (call_id,)))
    for index, step in verdict.duplicates:
        call_id = occurrences[index].id or ""
        problems.append(Problem(
            "openai_responses", "duplicate_result", step,
            f"Duplicate function_call_output for call_id {call_id!r}.", (call_id,),
            strict_only=True))
    for orphan in verdict.pairing.orphans:
        call_id = orphan.id or ""
        problems.append(Problem("openai_responses", "orphaned_result", orphan.step,
                                RESPONSES_ORPHANED.format(id=call_id), (call_id,)))
    for step, call_id in repeated_call_ids(verdict.steps):
        first, second = [step + position for position, (ref_id, _name)
                         in enumerate(verdict.steps[step][0]) if ref_id == call_id][:2]
        problems.append(Problem(
            "openai_responses", "duplicate_call_id", second,
            f"Duplicate call_id {call_id!r} in function_call items {first} and {second}.",
            (call_id,), strict_only=True))
    problems.sort(key=lambda p: p.index)
    return problems


# -- Anthropic Messages ----------------------------------------------------------


def validate_anthropic(messages: Sequence[Mapping[str, Any]]) -> list[Problem]:
    """Checks a Messages API ``messages`` list.

    Consecutive messages of one role are merged into one turn first, as the API
    does. Each ``tool_use`` needs exactly one ``tool_result`` in the very next
    turn, each ``tool_result`` must answer a ``tool_use`` of the turn right
    before it (:func:`~adk_session_heal.providers.provider_rules.anthropic_verdict`), and
    must come before any other block of its merged turn
    (:func:`~adk_session_heal.providers.provider_rules.anthropic_results_not_first`).
    Indices in the texts are those of the messages as given.

    Args:
        messages: The messages, as plain dicts.

    Returns:
        The problems, ordered by index.
    """
    turn_first, turn_blocks, steps = anthropic_turns(messages)
    verdict = anthropic_verdict(steps)
    occurrences = verdict.pairing.occurrences
    problems: list[Problem] = []
    bad_results: dict[int, list[str]] = {}  # turn -> result ids not answering turn - 1
    duplicate_results: dict[int, list[str]] = {}
    unanswered: dict[int, list[str]] = {}
    for occurrence, answer in zip(occurrences, verdict.answers, strict=True):
        if answer < 0:
            unanswered.setdefault(occurrence.step, []).append(occurrence.id or "")
    for index, step in verdict.misplaced:
        bad_results.setdefault(step, []).append(occurrences[index].id or "")
    for orphan in verdict.pairing.orphans:
        bad_results.setdefault(orphan.step, []).append(orphan.id or "")
    reported: set[int] = set()
    for index, step in verdict.duplicates:
        if index not in reported:  # one problem per call, at its second result
            reported.add(index)
            duplicate_results.setdefault(step, []).append(occurrences[index].id or "")
    for turn, ids in unanswered.items():
        problems.append(Problem("anthropic", "unanswered_call", turn_first[turn],
                                ANTHROPIC_UNANSWERED.format(index=turn_first[turn],
                                                            ids=", ".join(ids)), tuple(ids)))
    # An orphan is reported at the first result with its id in its turn, a duplicate at the second.
    results: tuple[tuple[ProblemCode, str, dict[int, list[str]], int], ...] = (
        ("orphaned_result", ANTHROPIC_ORPHANED, bad_results, 0),
        ("duplicate_result", ANTHROPIC_DUPLICATE, duplicate_results, 1),
    )
    for code, text, by_turn, skip in results:
        for turn, ids in by_turn.items():
            for call_id in ids:
                index, block = _result_block(turn_blocks[turn], call_id, skip)
                problems.append(Problem("anthropic", code, index,
                                        text.format(index=index, block=block, id=call_id),
                                        (call_id,)))
    for turn, call_id in repeated_call_ids(steps):
        index, block = _block(turn_blocks[turn], "tool_use", "id", call_id, 1)
        problems.append(Problem("anthropic", "duplicate_call_id", index,
                                ANTHROPIC_DUPLICATE_ID.format(index=index, block=block),
                                (call_id,)))
    for index, ids in anthropic_results_not_first(messages, turn_first):
        problems.append(Problem("anthropic", "result_not_first", index,
                                ANTHROPIC_NOT_FIRST.format(index=index, count=len(ids)),
                                tuple(ids)))
    problems.sort(key=lambda p: p.index)
    return problems


def _result_block(
    blocks: Sequence[AnthropicBlock], call_id: str, skip: int
) -> tuple[int, int]:
    """Finds the (message index, block index) of a result, skipping ``skip`` matches."""
    return _block(blocks, "tool_result", "tool_use_id", call_id, skip)


def _block(
    blocks: Sequence[AnthropicBlock], kind: str, key: str, call_id: str, skip: int
) -> tuple[int, int]:
    """Finds the (message index, block index) of a ``kind`` block whose ``key`` is
    ``call_id``, skipping ``skip`` matches."""
    fallback = (blocks[0][0], blocks[0][1]) if blocks else (0, 0)
    for index, position, block in blocks:
        if block.get("type") == kind and (block.get(key) or "") == call_id:
            if skip == 0:
                return index, position
            skip -= 1
    return fallback


# -- Gemini ----------------------------------------------------------------------


def validate_gemini(contents: Sequence[GeminiContent]) -> list[Problem]:
    """Checks Gemini ``contents``.

    A function-call turn must come right after a user turn or a function
    response turn; the turn right after it must hold exactly one response per
    call (and nothing but responses to it); a function-response turn must come
    right after the call turn it answers
    (:func:`~adk_session_heal.providers.provider_rules.gemini_verdict`).

    Args:
        contents: ``types.Content`` objects or their dicts.

    Returns:
        The problems, ordered by index.
    """
    verdict = contents_verdict(contents)
    steps = verdict.steps
    ids_by_step: dict[int, list[str]] = {}
    for occurrence in verdict.pairing.occurrences:
        ids_by_step.setdefault(occurrence.step, []).append(occurrence.id or "")
    problems = [Problem("gemini", "turn_order", step, GEMINI_CALL_ORDER,
                        tuple(ids_by_step[step])) for step in verdict.out_of_order]
    last = len(steps) - 1
    for step in gemini_miscounted(verdict):
        problems.append(Problem(
            "gemini", "count_mismatch" if step < last else "unanswered_call", step,
            GEMINI_COUNT, tuple(ids_by_step[step]), strict_only=step == last))
    misplaced = {o.step for o in verdict.pairing.orphans}
    misplaced.update(step for _index, step in verdict.misplaced)
    for step in misplaced:
        problems.append(Problem("gemini", "orphaned_result", step, GEMINI_RESPONSE_ORDER,
                                tuple(r[0] or "" for r in steps[step][1])))
    problems.sort(key=lambda p: p.index)
    return problems


# -- strict alternation ----------------------------------------------------------


def validate_alternation(messages: Sequence[Any], provider: Provider) -> list[Problem]:
    """Checks strict role alternation, as Amazon Bedrock's Converse API wants it.

    Each message whose side (user or assistant; a tool result is a user turn,
    see :func:`~adk_session_heal.providers.provider_rules.alternation_roles`) is that of
    the message before it is a ``role_alternation`` problem, and a user turn
    holding tool results and other content a ``mixed_result_turn`` one
    (:func:`~adk_session_heal.providers.provider_rules.mixed_result_turns`). A healed
    history followed by the next user message (call, heal, user text) has a
    ``role_alternation`` problem: the heal's tool result and the text are two
    user messages in a row. Merging them makes a mixed turn; for such a
    provider, put a model turn between them at request time
    (:func:`~adk_session_heal.providers.request_repair.merge_same_role_contents` with
    ``bridge``).

    Args:
        messages: The provider-format list (messages, items or contents).
        provider: Which format it is.

    Returns:
        The problems, ordered by index.
    """
    problems = [Problem(provider, "role_alternation", index, STRICT_ALTERNATION)
                for index in same_role_repeats(alternation_roles(messages, provider))]
    problems += [Problem(provider, "mixed_result_turn", index,
                         MIXED_RESULT_TURN.format(index=index))
                 for index in mixed_result_turns(messages, provider)]
    problems.sort(key=lambda p: p.index)
    return problems


# -- one entry point ---------------------------------------------------------------


def validate(
    messages: Sequence[Any], provider: Provider, *, strict_alternation: bool = False
) -> list[Problem]:
    """Runs the validator of one provider on a request already in its format.

    Args:
        messages: The provider-format list (messages, items or contents).
        provider: Which format it is.
        strict_alternation: Also require strictly alternating roles
            (:func:`validate_alternation`), for a path that sends the
            messages unmerged to an API such as Bedrock Converse.

    Returns:
        The problems, ordered by index.

    Raises:
        ValueError: For an unknown provider.
    """
    if provider == "openai_chat":
        problems = validate_openai_chat(messages)
    elif provider == "openai_responses":
        problems = validate_openai_responses(messages)
    elif provider == "anthropic":
        problems = validate_anthropic(messages)
    elif provider == "gemini":
        problems = validate_gemini(messages)
    else:
        raise ValueError(
            f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    if strict_alternation:
        problems = sorted(problems + validate_alternation(messages, provider),
                          key=lambda p: p.index)
    return problems


def provider_problems(
    history: Sequence[Any], provider: Provider, *, strict_alternation: bool = False
) -> list[Problem]:
    """Would ``provider`` reject this session or request, and why?

    Args:
        history: ADK ``Event`` objects, stored event JSON dicts (as in ADK's
            ``event_data`` column), or ``types.Content`` objects (an
            ``LlmRequest``'s contents), oldest first.
        provider: The format to convert to and check.
        strict_alternation: Also require strictly alternating roles (see
            :func:`validate`).

    Returns:
        The problems of the converted history; indices refer to the converted
        list (see :mod:`adk_session_heal.providers.formats`).
    """
    from .formats import convert

    return validate(convert(history, provider), provider,
                    strict_alternation=strict_alternation)


# -- the request as ADK builds it ---------------------------------------------------


async def adk_request_contents(session: Session, agent: BaseAgent) -> list[types.Content]:
    """Builds the contents of ``agent``'s next model request as the installed ADK would.

    Runs ADK's own contents request processor
    (``google.adk.flows.llm_flows.contents.request_processor``) over the
    session's events, as a ``Runner`` does before each model call: rewinds,
    branches, other agents' messages, compaction, and the rearranging of
    function responses (a response stored after a later turn is sent right
    after its call). Nothing is written or sent.

    Args:
        session: The session, with the events the request is built from (the
            new user message included, as the runner appends it first).
        agent: The ``LlmAgent`` about to call its model (its ``include_contents``
            and model decide what ADK keeps).

    Returns:
        The request's contents, oldest first.
    """
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.flows.llm_flows.contents import request_processor
    from google.adk.models.llm_request import LlmRequest
    from google.adk.sessions import InMemorySessionService

    newest = session.events[-1].invocation_id if session.events else ""
    context = InvocationContext(
        session_service=InMemorySessionService(),  # required; the processor never uses it
        invocation_id=newest or "adk-session-heal-request",
        agent=agent,
        session=session,
    )
    request = LlmRequest()
    async for _event in request_processor.run_async(context, request):
        pass
    return list(request.contents)


async def adk_request_problems(
    session: Session, agent: BaseAgent, provider: Provider, *, strict_alternation: bool = False
) -> list[Problem]:
    """Would ``provider`` reject the request ADK builds from this session, and why?

    :func:`adk_request_contents`, then :func:`provider_problems` on the result.

    Args:
        session: The session (see :func:`adk_request_contents`).
        agent: The agent about to call its model.
        provider: The format to convert the request's contents to and check.
        strict_alternation: Also require strictly alternating roles (see
            :func:`validate`).

    Returns:
        The problems; indices refer to the converted request.
    """
    return provider_problems(await adk_request_contents(session, agent), provider,
                             strict_alternation=strict_alternation)
