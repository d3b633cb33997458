"""What the installed ADK does with a dead read-only call when RerunSafeCallsPlugin is on.

``python rerun_check.py`` (with adk-session-heal installed beside that ADK):
stores ``user, call(get_weather, charge_card)`` (the process died mid-tools)
in that ADK's ``InMemorySessionService``, then runs the user's next turn
through its real ``Runner`` behind ``HealingSessionService`` with
``RerunSafeCallsPlugin`` (``get_weather`` read-only, ``charge_card``
side-effect). Prints one JSON line: the ADK version, the tools run, the stored
order and the model's request. Exits 1 unless get_weather ran exactly once
and charge_card never, the stored real result precedes the new message, and
the request holds one answer per call and breaks no provider rule.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from adk_session_heal import HealingSessionService, HealPolicy, ToolEffect
from adk_session_heal.adk_compat import ADK_VERSION
from adk_session_heal.rerun_plugin import RerunSafeCallsPlugin
from adk_session_heal.testing import History, ScriptedModel, outline
from adk_session_heal.validators import PROVIDERS, provider_problems

APP, USER, AGENT = "rerun_app", "rerun_user", "shop"
RUNS: list[str] = []


def get_weather(city: str) -> dict[str, Any]:
    """Returns the weather of a city."""
    RUNS.append("get_weather")
    return {"city": city, "temp_c": 21}


def charge_card(amount: int) -> dict[str, Any]:
    """Charges the card."""
    RUNS.append("charge_card")
    return {"charged": amount}


async def main() -> None:
    policy = HealPolicy(rerun_safe_calls=True, tool_effects={
        "get_weather": ToolEffect.READ_ONLY, "charge_card": ToolEffect.SIDE_EFFECT})
    inner = InMemorySessionService()
    history = History(agent=AGENT, start=time.time() - 600)
    history.user("weather in Paris, and pay my order")
    history.calls(("get_weather", {"city": "Paris"}), ("charge_card", {"amount": 42}),
                  ids=["wx-1", "pay-1"])
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in history.events:
        await inner.append_event(session, event)
    model = ScriptedModel(script=[ScriptedModel.say("Here you go.")],
                          validate=lambda contents: [])  # record whatever ADK sends
    runner = Runner(app_name=APP, agent=LlmAgent(name=AGENT, model=model,
                                                 tools=[get_weather, charge_card]),
                    session_service=HealingSessionService(inner, policy),
                    plugins=[RerunSafeCallsPlugin(policy)])
    message = types.Content(role="user", parts=[types.Part(text="hello?")])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    (request,) = model.requests
    answers = {r.id: dict(r.response or {}) for e in stored.events
               for r in e.get_function_responses()}
    words = outline(stored.events)
    line = {
        "adk": ".".join(map(str, ADK_VERSION)),
        "runs": RUNS,
        "stored": words,
        "runner_request": outline(request.contents),
        "answers": answers,
        "request_problems": [x.code for p in PROVIDERS
                             for x in provider_problems(request.contents, p)],
    }
    print(json.dumps(line))
    responses = [i for i, w in enumerate(words) if w.startswith("response")]
    if (RUNS != ["get_weather"] or answers.get("wx-1") != {"city": "Paris", "temp_c": 21}
            or "error" not in answers.get("pay-1", {}) or line["request_problems"]
            or not responses or max(responses) > words.index("hello?")):
        sys.exit(f"rerun: {line}")


if __name__ == "__main__":
    asyncio.run(main())
