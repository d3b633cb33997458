"""Tests for adk_session_heal.providers.validators and adk_session_heal.providers.formats."""

from __future__ import annotations

from typing import Any

import pytest
from contents import all_problems, answers, calls, model, seed_history, user, valid_histories
from hypothesis import given, settings

from adk_session_heal.core.pairing import pair
from adk_session_heal.providers.formats import convert, to_anthropic, to_openai_chat
from adk_session_heal.providers.validators import (
    PROVIDERS,
    provider_problems,
    validate,
    validate_alternation,
    validate_anthropic,
    validate_gemini,
    validate_openai_chat,
    validate_openai_responses,
)
from adk_session_heal.testing import History


def test_positional_pairing_gives_each_parallel_idless_call_its_response() -> None:
    """With idless="positional", two id-less calls of one tool are each answered."""
    steps = [([(None, "w"), (None, "w")], ()), ((), [(None, "w"), (None, "w")])]
    assert [o.responses for o in pair(steps, idless="positional").occurrences] == [[1], [1]]
    assert [o.responses for o in pair(steps).occurrences] == [[], [1, 1]]


def test_openai_chat_dangling_call_has_openais_text() -> None:
    """An unanswered tool call is reported with OpenAI's error text and ids."""
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "user", "content": "hello?"},
    ]
    (problem,) = validate_openai_chat(messages)
    assert problem.message == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: b")
    assert (problem.index, problem.code, problem.ids) == (1, "unanswered_call", ("b",))


def test_openai_chat_orphaned_and_late_tool_messages() -> None:
    """A tool message with no call, or after another message, is rejected as OpenAI does."""
    messages: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": "x", "content": "1"},
        {"role": "assistant", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
    ]
    problems = validate_openai_chat(messages)
    assert [(p.index, p.code) for p in problems] == [
        (0, "orphaned_result"), (1, "unanswered_call"), (3, "orphaned_result")]
    assert "must be a response to a preceeding message with 'tool_calls'" in problems[0].message


def test_openai_chat_duplicate_result_is_strict_only() -> None:
    """A second tool message for one call is flagged, marked as our stricter rule."""
    messages = [
        {"role": "assistant", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "a", "content": "2"},
    ]
    (problem,) = validate_openai_chat(messages)
    assert (problem.code, problem.index, problem.strict_only) == ("duplicate_result", 2, True)


def test_openai_responses_texts() -> None:
    """Missing outputs and calls are reported with the Responses API's texts."""
    items = [
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "z", "output": "1"},
    ]
    assert [p.message for p in validate_openai_responses(items)] == [
        "No tool output found for function call a.",
        "No tool call found for function call output with call_id z.",
    ]


def test_anthropic_merges_turns_and_uses_its_texts() -> None:
    """Consecutive same-role messages form one turn; missing, stray and duplicate results."""
    ok = [
        {"role": "assistant", "content": [{"type": "text", "text": "let me see"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
    ]
    assert validate_anthropic(ok) == []
    bad = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "hello?"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b"},
                                     {"type": "tool_result", "tool_use_id": "b"}]},
    ]
    # The two user messages merge into one turn: "a" is answered in the next turn, but its
    # result follows the user's text there, which the API refuses.
    assert [(p.code, p.index) for p in validate_anthropic(bad)] == [
        ("result_not_first", 1), ("duplicate_result", 4)]
    stray = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": "stop"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
    ]
    messages = [p.message for p in validate_anthropic(stray)]
    assert messages == [
        "messages.0: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "a. Each `tool_use` block must have a corresponding `tool_result` block in the next "
        "message.",
        "messages.3.content.0: unexpected `tool_use_id` found in `tool_result` blocks: a. Each "
        "`tool_result` block must have a corresponding `tool_use` block in the previous message.",
    ]


def test_anthropic_duplicate_result_text() -> None:
    """Two results for one tool_use give Anthropic's 'single result' error."""
    messages = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b"},
                                     {"type": "tool_result", "tool_use_id": "b"}]},
    ]
    (problem,) = validate_anthropic(messages)
    assert problem.message == (
        "messages.1.content.1: each tool_use must have a single result. Found multiple "
        "`tool_result` blocks with id: b")


def _shared_call(kind: str) -> dict[str, Any]:
    """One OpenAI Chat tool call with the id ``x``."""
    return {"id": "x", "type": "function", "function": {"name": kind, "arguments": "{}"}}


def test_openai_chat_two_results_for_an_id_two_calls_share_have_openais_text() -> None:
    """Parallel calls sharing an id, each answered: OpenAI refuses the second tool message."""
    messages = [
        {"role": "user", "content": "two things"},
        {"role": "assistant", "tool_calls": [_shared_call("a"), _shared_call("b")]},
        {"role": "tool", "tool_call_id": "x", "content": "1"},
        {"role": "tool", "tool_call_id": "x", "content": "2"},
    ]
    (problem,) = validate_openai_chat(messages)
    assert (problem.code, problem.index, problem.ids, problem.strict_only) == (
        "duplicate_call_id", 3, ("x",), False)
    assert problem.message == ("Invalid parameter: Duplicate value for 'tool_call_id' of 'x', "
                               "in messages[2] and messages[3].")
    once = messages[:3]  # answered once: one call is reported unanswered, nothing more
    assert [p.code for p in validate_openai_chat(once)] == ["unanswered_call"]


def test_anthropic_refuses_two_tool_uses_with_one_id_in_a_turn() -> None:
    """Anthropic's text for a repeated ``tool_use`` id, at the second block, answered or not."""
    messages = [
        {"role": "user", "content": "two things"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "x", "name": "a", "input": {}},
            {"type": "tool_use", "id": "x", "name": "b", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"},
                                     {"type": "tool_result", "tool_use_id": "x"}]},
    ]
    (problem,) = validate_anthropic(messages)
    assert (problem.code, problem.index, problem.ids) == ("duplicate_call_id", 1, ("x",))
    assert problem.message == "messages.1.content.1: `tool_use` ids must be unique"


def test_openai_responses_flags_two_function_calls_with_one_call_id_as_strict_only() -> None:
    """The Responses API's own text for this is not known: flagged as our stricter rule."""
    items = [
        {"type": "function_call", "call_id": "x", "name": "a", "arguments": "{}"},
        {"type": "function_call", "call_id": "x", "name": "b", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "x", "output": "1"},
        {"type": "function_call_output", "call_id": "x", "output": "2"},
    ]
    (problem,) = validate_openai_responses(items)
    assert (problem.code, problem.index, problem.strict_only) == ("duplicate_call_id", 1, True)


def test_a_history_healed_around_calls_sharing_an_id_is_refused_by_openai_and_anthropic(
) -> None:
    """Answered one response each, parallel calls sharing an id still fail both providers;
    Gemini, which pairs by position, accepts them."""
    h = History()
    h.user("two things")
    h.calls("a", "b", ids=["x", "x"])
    h.respond(("x", "a"), ("x", "b"))
    codes = {p: [x.code for x in provider_problems(h.events, p)] for p in PROVIDERS}
    assert codes == {"openai_chat": ["duplicate_call_id"],
                     "openai_responses": ["duplicate_call_id"],
                     "anthropic": ["duplicate_call_id"], "gemini": []}


def test_gemini_turn_order_and_counts() -> None:
    """Gemini's three rules: call after user turn, response right after, equal counts."""
    assert validate_gemini([calls(("a", "f")), answers(("a", "f"))])[0].message == (
        "Please ensure that function call turn comes immediately after a user turn or after a "
        "function response turn.")
    short = [user("q"), calls(("a", "f"), ("b", "f")), answers(("a", "f"))]
    assert [p.code for p in validate_gemini(short)] == ["count_mismatch"]
    late = [user("q"), calls(("a", "f")), model("hmm"), answers(("a", "f"))]
    assert [p.code for p in validate_gemini(late)] == ["count_mismatch", "orphaned_result"]
    assert validate_gemini(late)[1].message == (
        "Please ensure that function response turn comes immediately after a function call "
        "turn.")
    trailing = validate_gemini([user("q"), calls(("a", "f"))])
    assert [(p.code, p.strict_only) for p in trailing] == [("unanswered_call", True)]


def test_gemini_accepts_dicts_in_camel_case() -> None:
    """Content dicts as the REST API spells them are read too."""
    contents = [
        {"role": "user", "parts": [{"text": "q"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f"}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
    ]
    assert validate_gemini(contents) == []


def test_session_with_dead_call_is_rejected_by_every_provider() -> None:
    """provider_problems over stored events says which provider rejects what."""
    history = History()
    history.user("weather?")
    call_id = history.call("get_weather")
    history.user("hello?")
    for provider in PROVIDERS:
        problems = provider_problems(history.events, provider)
        assert problems and problems[0].ids == (call_id,), provider
    stored = [e.model_dump(exclude_none=True, mode="json") for e in history.events]
    assert provider_problems(stored, "anthropic") == provider_problems(history.events,
                                                                        "anthropic")


def test_converters_follow_adk_model_shapes() -> None:
    """LiteLLM-style tool messages and Anthropic blocks come out of ADK contents."""
    contents = seed_history()
    chat = to_openai_chat(contents)
    assert [m["role"] for m in chat] == [
        "user", "assistant", "user", "assistant", "tool", "assistant", "user", "assistant",
        "tool"]
    assert chat[3]["tool_calls"][0]["id"] == "c1" and chat[4]["tool_call_id"] == "c1"
    blocks = to_anthropic(contents)[4]["content"]
    assert blocks[0]["type"] == "tool_result" and blocks[0]["tool_use_id"] == "c1"
    with pytest.raises(ValueError, match="unknown provider"):
        convert(contents, "cohere")


@settings(max_examples=60, deadline=None)
@given(valid_histories())
def test_generated_valid_histories_pass_every_validator(contents: list[Any]) -> None:
    """The generator used by the property tests only makes accepted histories."""
    assert all_problems(contents) == []


@settings(max_examples=30, deadline=None)
@given(valid_histories(idless=True))
def test_idless_parallel_calls_pass_gemini(contents: list[Any]) -> None:
    """Id-less parallel calls (ADK strips adk- ids for Gemini) pair positionally."""
    assert all_problems(contents, with_ids=False) == []


def test_anthropic_wants_tool_results_at_the_beginning_of_the_merged_user_turn() -> None:
    """A user text merged in before the tool_result is rejected, as the Messages API does."""
    call = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]}
    result = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
    text_first = [{"role": "user", "content": "go"}, call, {"role": "user", "content": "hi?"},
                  result]
    (problem,) = validate_anthropic(text_first)
    assert (problem.code, problem.index, problem.ids) == ("result_not_first", 2, ("toolu_1",))
    assert "Did not find 1 `tool_result` block(s) at the beginning" in problem.message
    result_first = [{"role": "user", "content": "go"}, call, result,
                    {"role": "user", "content": "hi?"}]
    assert validate_anthropic(result_first) == []


def _healed_then_user() -> History:
    """user, call, heal (a synthetic tool result, role user), the user's next message."""
    from adk_session_heal.policy import DEFAULT_PAYLOAD

    history = History()
    history.user("weather in Paris?")
    call_id = history.call("get_weather", {"city": "Paris"})
    history.respond((call_id, "get_weather", DEFAULT_PAYLOAD))
    history.user("hello?")
    return history


def test_a_healed_history_then_a_user_message_breaks_only_strict_alternation() -> None:
    """Anthropic merges heal result + next user text (valid); strict alternation rejects them."""
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
        {"role": "user", "content": [{"type": "text", "text": "hello?"}]},
    ]
    assert validate_anthropic(messages) == []
    assert validate(messages, "anthropic") == []
    [problem] = validate(messages, "anthropic", strict_alternation=True)
    assert (problem.provider, problem.code, problem.index) == ("anthropic", "role_alternation", 3)
    assert problem.message.startswith("A conversation must alternate between user and assistant")
    merged = [*messages[:2], {"role": "user", "content": [*messages[2]["content"],
                                                           *messages[3]["content"]]}]
    assert validate(merged, "anthropic") == []
    [mixed] = validate(merged, "anthropic", strict_alternation=True)
    assert (mixed.code, mixed.index) == ("mixed_result_turn", 2)
    assert "Conversation blocks and tool result blocks" in mixed.message
    bridged = [*messages[:3], {"role": "assistant", "content": "Noted."}, messages[3]]
    assert validate(bridged, "anthropic", strict_alternation=True) == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_strict_alternation_flags_the_message_after_a_heal_in_every_format(
    provider: Any,
) -> None:
    """A healed history then a user message: valid by default, one repeat under strict mode."""
    events = _healed_then_user().events
    assert provider_problems(events, provider) == []
    problems = provider_problems(events, provider, strict_alternation=True)
    assert [p.code for p in problems] == ["role_alternation"]
    assert validate_alternation(convert(events, provider), provider) == problems
