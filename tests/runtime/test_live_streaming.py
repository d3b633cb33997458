"""Live mode (``Runner.run_live``) for real, offline: ADK's live flow over the scripted live
model (``adk_session_heal.testing.ScriptedLiveModel``), a real session database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.genai import types
from live_runs import USER, LiveRun

from adk_session_heal.testing import (
    History,
    LiveSent,
    ProviderRejected,
    ScriptedLiveModel,
    outline,
)

APP = "live_app"


async def lookup(city: str) -> dict[str, str]:
    """Looks up the weather of a city."""
    return {"city": city, "sky": "sunny"}


def _weather_model_side(sent: LiveSent) -> list[LlmResponse]:
    """Calls ``lookup`` when asked about the weather; says what it got back."""
    if sent.text == "weather in Paris?":
        return [ScriptedLiveModel.call("lookup", {"city": "Paris"}, call_id="live-1")]
    if any(response.id == "live-1" for response in sent.function_responses):
        return [ScriptedLiveModel.say("It is sunny in Paris.")]
    return []


def _runner(service: DatabaseSessionService, model: ScriptedLiveModel, tools: list[Any],
            plugins: list[Any] | None = None) -> Runner:
    return Runner(app_name=APP, agent=LlmAgent(name="assistant", model=model, tools=tools),
                  session_service=service, plugins=plugins or [])


def _sent(model: ScriptedLiveModel) -> list[LiveSent]:
    return [sent for connection in model.connections for sent in connection.sent]


async def test_a_live_run_over_the_scripted_model_calls_a_tool_and_stores_its_answer(
        tmp_path: Path) -> None:
    """The scripted live model's call reaches the tool through ADK's live flow; the tool's
    answer goes back over the connection, the model's reply follows, the session stores all."""
    service = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path / 'live.db'}")
    try:
        session = await service.create_session(app_name=APP, user_id=USER)
        model = ScriptedLiveModel(script=_weather_model_side)
        async with LiveRun(_runner(service, model, [lookup]), session.id) as live:
            live.say("weather in Paris?")
            await live.until(lambda: any(event.content and event.content.parts
                                         and event.content.parts[0].text
                                         for event in live.events))
        answers = [response.response for sent in _sent(model)
                   for response in sent.function_responses]
        assert answers == [{"city": "Paris", "sky": "sunny"}]
        assert [sent.kind for sent in _sent(model)][:2] == ["open", "content"]
        stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert stored is not None
        assert outline(stored.events) == ["weather in Paris?", "call", "response:city,sky",
                                          "It is sunny in Paris."]
    finally:
        await service.close()


async def test_the_scripted_live_connection_refuses_what_a_live_api_would() -> None:
    """A history with an unanswered call, and a content with no JSON form (a tool's answer
    holding an object JSON cannot hold), are refused: ProviderRejected."""
    model = ScriptedLiveModel(script=_weather_model_side)
    history = History(agent="assistant")
    history.user("weather in Paris?")
    history.call("lookup", {"city": "Paris"}, call_id="dead-1")
    contents = [event.content for event in history.events if event.content is not None]
    async with model.connect(LlmRequest()) as connection:
        with pytest.raises(ProviderRejected, match="dead-1"):
            await connection.send_history(contents)
        unsendable = types.Content(role="user", parts=[types.Part.from_function_response(
            name="lookup", response={"result": object()})])
        with pytest.raises(ProviderRejected, match="cannot be sent"):
            await connection.send_content(unsendable)
    assert [sent.kind for sent in model.connections[0].sent] == ["open"]
    assert model.connections[0].closed
