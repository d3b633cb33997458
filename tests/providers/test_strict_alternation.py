"""Strict role alternation (Bedrock Converse) after a heal, and what ADK's Anthropic adapter sends.

A healed session whose user comes back is, in ADK's request, user, call, heal
(the tool result, role ``user``), the next user message: two user contents in a
row. ADK's native Anthropic adapter (``google.adk.models.anthropic_llm``) turns
each content into one message and merges nothing, so it sends two consecutive
user messages; the Messages API merges them (accepted), a strictly alternating
API (Bedrock Converse) would not, nor would it take them merged into one turn
(tool results and text may not share a turn there). A model turn put between
them at request time passes every strict rule. These tests run ADK's own
conversion function on the request ADK builds from a really healed session (no
network).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.genai import types

from adk_session_heal import HealingSessionService
from adk_session_heal.providers.request_repair import merge_same_role_contents
from adk_session_heal.providers.validators import adk_request_contents, validate, validate_anthropic
from adk_session_heal.runtime.context_filter import ToolAwareContextFilterPlugin
from adk_session_heal.testing import History, ProviderRejected, ScriptedModel, outline

anthropic_llm = pytest.importorskip("google.adk.models.anthropic_llm")

APP, USER, AGENT = "weather_app", "u", "assistant"


def adk_anthropic_messages(contents: Sequence[types.Content]) -> list[dict[str, Any]]:
    """The ``messages`` AnthropicLlm.generate_content_async builds from request contents.

    The same expression as ADK 2.13's ``generate_content_async``: one
    ``_content_to_message_param`` per content with one shared sanitizer,
    messages with empty content left out.
    """
    sanitizer = anthropic_llm._ToolUseIdSanitizer()
    messages = [anthropic_llm._content_to_message_param(content, sanitizer)
                for content in contents]
    return [dict(message) for message in messages if message["content"]]


async def healed_session(inner: InMemorySessionService) -> tuple[HealingSessionService, Session]:
    """A crashed call, healed by the wrapper when the user's next message is appended."""
    history = History(agent=AGENT, start=time.time() - 60)
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"}, call_id="call-w")
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in history.events:
        await inner.append_event(session, event)
    service = HealingSessionService(inner)
    fresh = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert fresh is not None
    history.user("hello?")
    await service.append_event(fresh, history.events[-1])
    healed = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert healed is not None
    assert outline(healed.events) == ["weather in Paris?", "call", "response:error", "hello?"]
    return service, healed


async def test_adk_anthropic_adapter_sends_the_heal_and_the_next_message_as_two_user_turns(
) -> None:
    """ADK's adapter merges nothing: heal + next user text are two user messages in a row."""
    _service, session = await healed_session(InMemorySessionService())
    contents = await adk_request_contents(session, LlmAgent(name=AGENT, model=ScriptedModel()))
    messages = adk_anthropic_messages(contents)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "user"]
    assert [[block["type"] for block in m["content"]] for m in messages] == [
        ["text"], ["tool_use"], ["tool_result"], ["text"]]
    assert messages[2]["content"][0]["tool_use_id"] == "call-w"
    assert validate_anthropic(messages) == [], "the Messages API merges consecutive user turns"
    [problem] = validate(messages, "anthropic", strict_alternation=True)
    assert (problem.code, problem.index) == ("role_alternation", 3)


async def test_merging_at_request_time_alternates_and_leaves_storage_alone() -> None:
    """merge_same_role_contents makes heal + text one user turn; the stored events don't move."""
    _service, session = await healed_session(InMemorySessionService())
    contents = await adk_request_contents(session, LlmAgent(name=AGENT, model=ScriptedModel()))
    merged = merge_same_role_contents(contents)
    messages = adk_anthropic_messages(merged)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [block["type"] for block in messages[2]["content"]] == ["tool_result", "text"]
    assert validate(messages, "anthropic") == []  # what the Messages API accepts
    assert [p.code for p in validate(messages, "anthropic", strict_alternation=True)] == [
        "mixed_result_turn"]  # alternates, but Bedrock wants tool results alone in a turn
    assert outline(contents) == ["weather in Paris?", "call", "response:error", "hello?"]
    assert outline(session.events) == ["weather in Paris?", "call", "response:error", "hello?"]


async def test_a_bridge_turn_at_request_time_passes_strict_alternation() -> None:
    """With bridge=, heal and text stay apart with a model turn between: every strict rule holds."""
    _service, session = await healed_session(InMemorySessionService())
    contents = await adk_request_contents(session, LlmAgent(name=AGENT, model=ScriptedModel()))
    bridged = merge_same_role_contents(contents, bridge="Noted.")
    assert outline(bridged) == ["weather in Paris?", "call", "response:error", "Noted.",
                                "hello?"]
    messages = adk_anthropic_messages(bridged)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert validate(messages, "anthropic", strict_alternation=True) == []
    assert validate(bridged, "gemini", strict_alternation=True) == []
    assert outline(session.events) == ["weather in Paris?", "call", "response:error", "hello?"]


def strictly_alternating_for_adk_anthropic(contents: Sequence[types.Content]) -> list[str]:
    """A ScriptedModel check: problems of ADK's Anthropic messages under strict alternation."""
    return [p.message for p in validate(adk_anthropic_messages(contents), "anthropic",
                                        strict_alternation=True)]


@pytest.mark.parametrize(("mode", "rejected"), [
    ("off", "must alternate"), ("merge", "cannot be provided in the same turn"),
    ("bridge", None)])
async def test_the_plugin_option_fixes_the_request_of_a_real_runner_turn(
    mode: str, rejected: str | None
) -> None:
    """Through a Runner: only strict_alternation with a bridge passes every strict rule."""
    inner = InMemorySessionService()
    service, session = await healed_session(inner)
    model = ScriptedModel(script=[ScriptedModel.say("Sorry, the weather tool failed.")],
                          validate=strictly_alternating_for_adk_anthropic)
    plugin = ToolAwareContextFilterPlugin(
        strict_alternation=mode != "off",
        alternation_bridge="Noted." if mode == "bridge" else None)
    runner = Runner(app_name=APP, agent=LlmAgent(name=AGENT, model=model),
                    session_service=service, plugins=[plugin])
    message = types.Content(role="user", parts=[types.Part(text="and now?")])

    async def turn() -> None:
        async for _ in runner.run_async(user_id=USER, session_id=session.id,
                                        new_message=message):
            pass

    if rejected is not None:
        with pytest.raises(ProviderRejected, match=rejected):
            await turn()
        return
    await turn()
    (request,) = model.requests
    assert outline(request.contents) == [
        "weather in Paris?", "call", "response:error", "Noted.", "hello?"]
    assert [len(c.parts or ()) for c in request.contents] == [1, 1, 1, 1, 2]
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    assert outline(stored.events) == [
        "weather in Paris?", "call", "response:error", "hello?", "and now?",
        "Sorry, the weather tool failed."]


async def bedrock_converse_turns(contents: Sequence[types.Content], modify_params: bool,
                                 monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """(role, block kinds) of the Converse messages ADK's LiteLlm path builds (no network).

    ADK's ``lite_llm._content_to_message_param`` per content, then LiteLLM's
    own Bedrock Converse conversion (``_bedrock_converse_messages_pt``).
    """
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no cost-map download
    litellm = pytest.importorskip("litellm")
    lite_llm = pytest.importorskip("google.adk.models.lite_llm")
    factory = pytest.importorskip("litellm.litellm_core_utils.prompt_templates.factory")
    monkeypatch.setattr(litellm, "modify_params", modify_params)
    messages: list[dict[str, Any]] = []
    for content in contents:
        converted = await lite_llm._content_to_message_param(content)
        for message in converted if isinstance(converted, list) else [converted]:
            messages.append(dict(message))
    blocks = factory._bedrock_converse_messages_pt(
        messages, model="anthropic.claude-3-5-sonnet-20240620-v1:0",
        llm_provider="bedrock_converse")
    return [(block["role"], [next(iter(part)) for part in block["content"]])
            for block in blocks]


async def test_litellm_s_bedrock_converse_path_merges_heal_and_text_unless_modify_params(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LiteLlm -> Bedrock Converse: merged into a mixed turn by default; modify_params bridges."""
    _service, session = await healed_session(InMemorySessionService())
    contents = await adk_request_contents(session, LlmAgent(name=AGENT, model=ScriptedModel()))
    assert await bedrock_converse_turns(contents, False, monkeypatch) == [
        ("user", ["text"]), ("assistant", ["toolUse"]), ("user", ["toolResult", "text"])]
    assert await bedrock_converse_turns(contents, True, monkeypatch) == [
        ("user", ["text"]), ("assistant", ["toolUse"]), ("user", ["toolResult"]),
        ("assistant", ["text"]), ("user", ["text"])]
    bridged = merge_same_role_contents(contents, bridge="Noted.")
    assert await bedrock_converse_turns(bridged, False, monkeypatch) == [
        ("user", ["text"]), ("assistant", ["toolUse"]), ("user", ["toolResult"]),
        ("assistant", ["text"]), ("user", ["text"])]
