"""Tests for providers/provider_rules.py: each provider's sequencing rule, pinned once."""

from __future__ import annotations

from typing import Any

from contents import answers, calls, chat_call, model, user

from adk_session_heal.providers.provider_rules import (
    alternation_roles,
    anthropic_turns,
    anthropic_verdict,
    call_turn_in_order,
    contents_verdict,
    gemini_miscounted,
    gemini_steps,
    gemini_verdict,
    mixed_result_turns,
    openai_chat_verdict,
    openai_responses_verdict,
    same_role_repeats,
    whole,
)
from adk_session_heal.testing import unpaired_tool_calls


def _tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "1"}


def test_openai_chat_answers_in_the_tool_run_right_after_the_call() -> None:
    """OpenAI Chat: a call is answered in the run of tool messages right after it."""
    verdict = openai_chat_verdict([
        {"role": "assistant", "tool_calls": [chat_call("a"), chat_call("b"), chat_call("c")]},
        _tool("a"), _tool("b"), _tool("b"),
        {"role": "user", "content": "hi"},
        _tool("c"),
    ])
    assert verdict.answers == [1, 2, -1]
    assert verdict.duplicates == [(1, 3)]
    assert verdict.misplaced == [(2, 5)]  # after another message: too late


def test_openai_responses_answers_anywhere_after_the_call() -> None:
    """OpenAI Responses: an output anywhere after its call answers it; no output, no answer."""
    verdict = openai_responses_verdict([
        {"type": "function_call", "call_id": "a", "name": "f"},
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "function_call_output", "call_id": "a"},
        {"type": "function_call", "call_id": "b", "name": "f"},
        {"type": "function_call_output", "call_id": "z"},
    ])
    assert verdict.answers == [2, -1]
    assert verdict.misplaced == [] and [o.id for o in verdict.pairing.orphans] == ["z"]


def test_anthropic_answers_in_the_very_next_merged_turn() -> None:
    """Anthropic: same-role messages merge; a tool_use is answered in the next turn only."""
    turn_first, _blocks, steps = anthropic_turns([
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f"}]},
        {"role": "user", "content": "wait"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "f"}]},
        {"role": "user", "content": "stop"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b"}]},
    ])
    assert turn_first == [0, 1, 3, 4, 5, 6]
    verdict = anthropic_verdict(steps)
    assert verdict.answers == [1, -1]
    assert verdict.misplaced == [(1, 5)]


def test_gemini_call_turn_follows_a_user_or_function_response_turn() -> None:
    """Gemini: a call turn must come right after a user-role turn (typed or responses)."""
    assert call_turn_in_order("user") and not call_turn_in_order("model")
    assert not call_turn_in_order(None)
    contents = [calls(("a", "f")), answers(("a", "f")), calls(("b", "f")), answers(("b", "f")),
                model("ok"), calls(("c", "f")), answers(("c", "f"))]
    assert gemini_verdict(*gemini_steps(contents)).out_of_order == {0, 5}


def test_gemini_answers_in_the_next_content_and_counts_parts() -> None:
    """Gemini: responses sit in the next content, as many response parts as call parts."""
    late = [user("q"), calls(("a", "f")), model("hmm"), answers(("a", "f"))]
    verdict = gemini_verdict(*gemini_steps(late))
    assert (verdict.answers, verdict.misplaced) == ([-1], [(0, 3)])
    assert gemini_miscounted(verdict) == [1]
    # Gemini counts parts: a twice and b never is the right count.
    swapped = [user("q"), calls(("a", "f"), ("b", "f")), answers(("a", "f"), ("a", "f"))]
    assert gemini_miscounted(gemini_verdict(*gemini_steps(swapped))) == []
    trailing = [user("q"), calls(("a", "f"))]
    assert gemini_miscounted(gemini_verdict(*gemini_steps(trailing))) == [1]


def test_whole_calls_are_answered_once_in_the_next_content_in_order() -> None:
    """ADK contents: a call is whole only if answered exactly once, next, and in order."""
    contents = [user("q"), calls(("a", "f"), ("b", "f")), answers(("a", "f"), ("a", "f")),
                model("x"), calls(("c", "f")), answers(("c", "f")),
                user("r"), calls(("d", "f")), answers(("d", "f"))]
    assert whole(gemini_verdict(*gemini_steps(contents))) == [False, False, False, True]


def test_scripted_models_check_is_the_contents_rule() -> None:
    """testing.unpaired_tool_calls rejects a call turn after a model turn and a doubled answer."""
    out_of_order = [user("q"), model("let me look"), calls(("a", "f")), answers(("a", "f"))]
    assert unpaired_tool_calls(out_of_order) == [
        "tool call turn at content 2 does not come right after a user or function-response "
        "content"]
    doubled = [user("q"), calls(("a", "f")), answers(("a", "f"), ("a", "f"))]
    assert unpaired_tool_calls(doubled) == [
        "tool call a at content 1 is answered 2 times in the next content"]
    fine = [user("q"), calls(("a", "f")), answers(("a", "f")), calls(("b", "f")),
            answers(("b", "f"))]
    assert unpaired_tool_calls(fine) == [] and all(whole(contents_verdict(fine)))


HEALED_THEN_USER_ANTHROPIC: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "x"}]},
    {"role": "user", "content": [{"type": "text", "text": "hello?"}]},
]


def test_strict_alternation_counts_a_tool_result_as_a_user_turn() -> None:
    """Anthropic messages user, call, heal result, user: the last user turn repeats its side."""
    roles = alternation_roles(HEALED_THEN_USER_ANTHROPIC, "anthropic")
    assert roles == ["user", "assistant", "user", "user"]
    assert same_role_repeats(roles) == [3]


def test_strict_alternation_reads_a_run_of_openai_tool_results_as_one_turn() -> None:
    """OpenAI Chat: parallel tool messages are one user turn; a user message after them repeats."""
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather and time?"},
        {"role": "assistant", "tool_calls": [chat_call("a"), chat_call("b")]},
        _tool("a"), _tool("b"),
        {"role": "user", "content": "hello?"},
    ]
    roles = alternation_roles(messages, "openai_chat")
    assert roles == [None, "user", "assistant", "user", None, "user"]
    assert same_role_repeats(roles) == [5]


def test_strict_alternation_over_responses_items_and_gemini_contents() -> None:
    """Responses: call/output runs are one turn each; Gemini: function responses are user turns."""
    items = [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "a", "name": "f"},
        {"type": "function_call", "call_id": "b", "name": "f"},
        {"type": "function_call_output", "call_id": "a"},
        {"type": "function_call_output", "call_id": "b"},
        {"role": "assistant", "content": "done"},
    ]
    assert same_role_repeats(alternation_roles(items, "openai_responses")) == []
    contents = [user("hi"), calls(("a", "f")), answers(("a", "f")), user("hello?"),
                model("ok")]
    assert same_role_repeats(alternation_roles(contents, "gemini")) == [3]


def test_a_turn_mixing_tool_results_and_text_is_found_in_anthropic_and_gemini() -> None:
    """Bedrock's rule: tool results alone in their turn; OpenAI formats cannot mix them."""
    merged = [*HEALED_THEN_USER_ANTHROPIC[:2], {"role": "user", "content": [
        *HEALED_THEN_USER_ANTHROPIC[2]["content"], *HEALED_THEN_USER_ANTHROPIC[3]["content"]]}]
    assert mixed_result_turns(HEALED_THEN_USER_ANTHROPIC, "anthropic") == []
    assert mixed_result_turns(merged, "anthropic") == [2]
    mixed = answers(("a", "f")).model_copy(update={"parts": [
        *(answers(("a", "f")).parts or ()), *(user("hello?").parts or ())]})
    assert mixed_result_turns([user("hi"), calls(("a", "f")), answers(("a", "f"))],
                              "gemini") == []
    assert mixed_result_turns([user("hi"), calls(("a", "f")), mixed], "gemini") == [2]
    assert mixed_result_turns([_tool("a"), {"role": "user", "content": "x"}],
                              "openai_chat") == []
