"""Re-running dead read-only calls on the next user message, through a real Runner."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.genai import types

from adk_session_heal.findings import CallStatus, classify
from adk_session_heal.policy import HealPolicy, ToolEffect
from adk_session_heal.rerun_plugin import RerunSafeCallsPlugin
from adk_session_heal.reruns import RERUN_METADATA_KEY, deferring, rerunnable_calls
from adk_session_heal.service import HealingSessionService
from adk_session_heal.testing import History, ScriptedModel, outline
from adk_session_heal.validators import PROVIDERS, provider_problems

APP, USER, AGENT = "rerun_app", "rerun_user", "shop"
POLICY = HealPolicy(rerun_safe_calls=True,
                    tool_effects={"get_weather": ToolEffect.READ_ONLY,
                                  "charge_card": ToolEffect.SIDE_EFFECT})


class Tools:
    """The agent's tools, counting their runs."""

    def __init__(self, *, weather_fails: bool = False) -> None:
        self.runs: list[tuple[str, dict[str, Any]]] = []
        self.weather_fails = weather_fails

    def get_weather(self, city: str) -> dict[str, Any]:
        """Returns the weather of a city."""
        self.runs.append(("get_weather", {"city": city}))
        if self.weather_fails:
            raise ConnectionError("weather service down")
        return {"city": city, "temp_c": 21}

    def charge_card(self, amount: int) -> dict[str, Any]:
        """Charges the card."""
        self.runs.append(("charge_card", {"amount": amount}))
        return {"charged": amount}


def died_mid_tools() -> History:
    """The model called get_weather and charge_card in one turn; the process died."""
    history = History(agent=AGENT, start=time.time() - 600)
    history.user("weather in Paris, and pay my order")
    history.calls(("get_weather", {"city": "Paris"}), ("charge_card", {"amount": 42}),
                  ids=["wx-1", "pay-1"])
    return history


async def turn(inner: InMemorySessionService, tools: Tools, policy: HealPolicy, *,
               resumable: bool = False) -> tuple[ScriptedModel, Session]:
    """Stores the crashed session, then runs the user's next turn through a real Runner."""
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in died_mid_tools().events:
        await inner.append_event(session, event)
    model = ScriptedModel(script=[ScriptedModel.say("Here you go.")])
    agent = LlmAgent(name=AGENT, model=model, tools=[tools.get_weather, tools.charge_card])
    app = App(name=APP, root_agent=agent, plugins=[RerunSafeCallsPlugin(policy)],
              resumability_config=ResumabilityConfig(is_resumable=resumable))
    runner = Runner(app=app, session_service=HealingSessionService(inner, policy))
    message = types.Content(role="user", parts=[types.Part(text="hello?")])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    return model, stored


def answers(events: list[Event]) -> dict[str, dict[str, Any]]:
    """Each call id's stored response."""
    return {r.id or "": dict(r.response or {}) for e in events for r in e.get_function_responses()}


async def test_the_read_only_call_runs_again_and_the_side_effect_call_is_healed(
        caplog: pytest.LogCaptureFixture) -> None:
    """get_weather re-runs once (real result stored before the message); charge_card never."""
    tools = Tools()
    with caplog.at_level(logging.WARNING, logger="adk_session_heal"):
        model, stored = await turn(InMemorySessionService(), tools, POLICY)
    assert tools.runs == [("get_weather", {"city": "Paris"})]
    stored_answers = answers(stored.events)
    assert stored_answers["wx-1"] == {"city": "Paris", "temp_c": 21}
    assert "error" in stored_answers["pay-1"] and stored_answers["pay-1"]["safe_to_retry"] is False
    rerun = [e for e in stored.events if RERUN_METADATA_KEY in (e.custom_metadata or {})]
    assert len(rerun) == 1 and rerun[0].custom_metadata is not None
    assert rerun[0].custom_metadata[RERUN_METADATA_KEY]["effects"] == ["read_only"]
    words = outline(stored.events)
    assert words.index("hello?") > max(i for i, w in enumerate(words) if w.startswith("response"))
    (request,) = model.requests
    assert not [p for p in PROVIDERS if provider_problems(request.contents, p)]
    assert sum("re-ran dead tool call get_weather#wx-1" in r.getMessage()
               for r in caplog.records) == 1


async def test_nothing_runs_again_when_off_or_resumable_and_the_calls_are_healed() -> None:
    """Without rerun_safe_calls, or in an app ADK resumes itself, both calls get heals."""
    for policy, resumable in ((HealPolicy(tool_effects=POLICY.tool_effects), False),
                              (POLICY, True)):
        tools = Tools()
        _, stored = await turn(InMemorySessionService(), tools, policy, resumable=resumable)
        assert tools.runs == []
        assert all("error" in a for a in answers(stored.events).values())


async def test_a_failing_re_run_stores_nothing_and_the_call_is_healed() -> None:
    """The tool raises on its re-run: the wrapper heals it as the message is stored."""
    tools = Tools(weather_fails=True)
    _, stored = await turn(InMemorySessionService(), tools, POLICY)
    assert tools.runs == [("get_weather", {"city": "Paris"})]
    assert "error" in answers(stored.events)["wx-1"]


def test_only_safe_calls_of_the_newest_invocation_are_re_runnable() -> None:
    """read_only/idempotent, with an id, in the newest invocation; deferring holds them."""
    history = died_mid_tools()
    earlier = History(agent=AGENT, start=time.time() - 7200)
    earlier.user("weather in Rome?")
    earlier.calls(("get_weather", {"city": "Rome"}), ids=["wx-0"])
    events = [*earlier.events, *[e.model_copy(update={"invocation_id": "inv-9"})
                                 for e in history.events]]
    incoming = Event(invocation_id="inv-10", author="user", timestamp=time.time(),
                     content=types.Content(role="user", parts=[types.Part(text="hi")]))
    findings = classify([*events, incoming], now=time.time())
    runnable = rerunnable_calls(events, findings, POLICY)
    assert [c.call_id for c in runnable] == ["wx-1"]  # not wx-0 (older turn), not pay-1
    held = deferring(findings, runnable)
    assert {c.call_id: c.status for c in held.calls}["wx-1"] is CallStatus.IN_FLIGHT
    assert {c.call_id: c.status for c in held.calls}["pay-1"] is CallStatus.SUPERSEDED


async def test_get_session_leaves_the_re_runnable_call_for_the_plugin() -> None:
    """With rerun_safe_calls and stale_after, a read leaves get_weather and heals charge_card."""
    inner = InMemorySessionService()
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in died_mid_tools().events:
        await inner.append_event(session, event)
    policy = HealPolicy(rerun_safe_calls=True, stale_after=60, clock_skew=0,
                        tool_effects=POLICY.tool_effects)
    read = await HealingSessionService(inner, policy).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    assert read is not None
    assert set(answers(read.events)) == {"pay-1"}
