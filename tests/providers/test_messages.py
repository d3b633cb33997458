"""Tests for adk_session_heal.messages: trimming and repair of provider-format dicts."""

from __future__ import annotations

import copy
import json
from typing import Any

from contents import chat_call, seed_history, valid_histories
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_session_heal.messages import (
    align_tail_start,
    anthropic_atomic_groups,
    anthropic_repair,
    anthropic_trim,
    atomic_groups,
    repair,
    trim,
)
from adk_session_heal.policy import DEFAULT_PAYLOAD, HealPolicy
from adk_session_heal.providers.formats import to_anthropic, to_openai_chat
from adk_session_heal.providers.validators import validate_anthropic, validate_openai_chat

CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": None, "tool_calls": [chat_call("a"), chat_call("b")]},
    {"role": "tool", "tool_call_id": "a", "content": "sun"},
    {"role": "tool", "tool_call_id": "b", "content": "rain"},
    {"role": "assistant", "content": "mixed"},
    {"role": "user", "content": "thanks"},
]


def test_atomic_groups_hold_call_results_and_follow_up() -> None:
    """An assistant tool call, its tool messages and the follow-up form one group."""
    assert atomic_groups(CHAT) == [range(1), range(1, 2), range(2, 6), range(6, 7)]


def test_align_tail_start_moves_back_but_not_into_the_prefix() -> None:
    """A cut inside a group moves to its start; never below the protected prefix."""
    assert align_tail_start(CHAT, 4) == 2
    assert align_tail_start(CHAT, 4, protected_prefix=3) == 3
    assert align_tail_start(CHAT, 6) == 6


def test_trim_keeps_whole_groups() -> None:
    """Keeping the last 3 messages widens to the whole tool round, system kept first."""
    assert trim(CHAT, keep_last=3, keep_first=1) == [CHAT[0], *CHAT[2:]]
    assert validate_openai_chat(trim(CHAT, keep_last=3, keep_first=1)) == []


def test_repair_answers_dangling_and_drops_orphans_without_mutating() -> None:
    """A missing tool message is synthesised with the wrapper's payload; stray ones go."""
    broken = [CHAT[1], CHAT[2], CHAT[3], {"role": "tool", "tool_call_id": "zz", "content": "?"},
              CHAT[6]]
    before = copy.deepcopy(broken)
    fixed = repair(broken)
    assert broken == before
    assert validate_openai_chat(fixed) == []
    synthetic = [m for m in fixed if m not in broken]
    assert synthetic == [{"role": "tool", "tool_call_id": "b",
                          "content": json.dumps(dict(DEFAULT_PAYLOAD))}]
    assert fixed.index(synthetic[0]) == 3


def test_repair_uses_the_policy_payload() -> None:
    """A custom HealPolicy payload is what the synthetic tool message says."""
    fixed = repair(CHAT[1:3], HealPolicy(payload={"error": "gone"}))
    assert [json.loads(m["content"]) for m in fixed if m["role"] == "tool"] == [
        {"error": "gone"}, {"error": "gone"}]


def test_anthropic_repair_adds_results_to_the_next_user_message() -> None:
    """A tool_use without result gets an is_error result at the front of the next turn."""
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "hello?"}]},
    ]
    fixed = anthropic_repair(messages)
    assert validate_anthropic(fixed) == []
    assert fixed[2]["content"][0]["tool_use_id"] == "a"
    assert fixed[2]["content"][0]["is_error"] is True
    assert messages[2]["content"] == [{"type": "text", "text": "hello?"}]


def test_anthropic_groups_and_trim() -> None:
    """Anthropic groups keep tool_use with its result turn; trim keeps them whole."""
    messages = to_anthropic(seed_history())
    assert anthropic_atomic_groups(messages)[2] == range(2, 3)
    assert range(3, 6) in anthropic_atomic_groups(messages)
    assert anthropic_trim(messages, keep_last=1) == messages[7:]
    assert anthropic_trim(messages, keep_last=2) == messages[7:]
    assert anthropic_trim(messages, keep_last=3) == messages[6:]
    assert validate_anthropic(anthropic_trim(messages, keep_last=4)) == []


def _cut(messages: list[dict[str, Any]], drop: set[int]) -> list[dict[str, Any]]:
    return [m for i, m in enumerate(messages) if i not in drop]


@settings(max_examples=80, deadline=None)
@given(valid_histories(), st.integers(0, 12), st.integers(0, 4))
def test_trim_of_valid_chat_stays_valid(contents: list[Any], keep_last: int,
                                        keep_first: int) -> None:
    """Trimming an accepted OpenAI history gives an accepted subsequence."""
    messages = to_openai_chat(contents)
    out = trim(messages, keep_last, keep_first)
    assert validate_openai_chat(out) == []
    assert len(out) >= min(len(messages), keep_last)
    it = iter(messages)
    assert all(any(m is x for x in it) for m in out)


@settings(max_examples=80, deadline=None)
@given(valid_histories(), st.sets(st.integers(0, 40)))
def test_repair_of_any_cut_is_valid(contents: list[Any], drop: set[int]) -> None:
    """Whatever messages are removed, repair makes OpenAI and Anthropic accept the rest."""
    chat = _cut(to_openai_chat(contents), drop)
    fixed = repair(chat)
    assert validate_openai_chat(fixed) == []
    assert [m for m in fixed if not (m.get("role") == "tool" and m not in chat)] == [
        m for m in chat if m in fixed]
    anthropic = _cut(to_anthropic(contents), drop)
    assert validate_anthropic(anthropic_repair(anthropic)) == []
