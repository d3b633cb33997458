"""What the installed ADK does with a dead read-only call when RerunSafeCallsPlugin is on.

``python rerun_check.py`` (with adk-session-heal installed beside that ADK):
stores ``user, call(get_weather, charge_card, read_customer x2)`` (the process
died mid-tools) in that ADK's ``InMemorySessionService``, then runs the user's
next turn through its real ``Runner`` behind ``HealingSessionService`` with
``RerunSafeCallsPlugin`` (``get_weather`` and ``read_customer`` read-only,
``charge_card`` side-effect), a plugin guard and the agent's
``before_tool_callback`` refusing another customer's record, and the agent's
``after_tool_callback`` masking the SSN. Prints one JSON line: the ADK
version, the tools run, the stored order and the model's request. Exits 1
unless get_weather and the user's own read_customer ran exactly once and
charge_card and the other customer's read never, the guard's refusal and the
masked record are what is stored and sent (the SSN nowhere in clear), the
stored answers precede the new message, and the request holds one answer per
call and breaks no provider rule: re-runs take that ADK's own tool path.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from adk_session_heal import HealingSessionService, HealPolicy, ToolEffect
from adk_session_heal.core.adk_compat import ADK_VERSION
from adk_session_heal.providers.validators import PROVIDERS, provider_problems
from adk_session_heal.runtime.rerun_plugin import RerunSafeCallsPlugin
from adk_session_heal.testing import History, ScriptedModel, outline

APP, USER, AGENT = "rerun_app", "rerun_user", "shop"
RUNS: list[str] = []
SSN = "123-45-6789"
REFUSAL = {"error": "not this user's record"}


def get_weather(city: str) -> dict[str, Any]:
    """Returns the weather of a city."""
    RUNS.append("get_weather")
    return {"city": city, "temp_c": 21}


def charge_card(amount: int) -> dict[str, Any]:
    """Charges the card."""
    RUNS.append("charge_card")
    return {"charged": amount}


async def read_customer(customer: str) -> dict[str, Any]:
    """Returns a customer's record."""
    RUNS.append(f"read_customer:{customer}")
    return {"customer": customer, "ssn": SSN}


def agent_guard(tool: Any, args: dict[str, Any], tool_context: Any) -> dict[str, Any] | None:
    """The agent's before_tool_callback: only the user's own record."""
    return dict(REFUSAL) if args.get("customer", USER) != USER else None


def agent_mask(tool: Any, args: dict[str, Any], tool_context: Any,
               tool_response: Any) -> dict[str, Any] | None:
    """The agent's after_tool_callback: the SSN masked."""
    if isinstance(tool_response, dict) and "ssn" in tool_response:
        return {**tool_response, "ssn": "***-**-" + tool_response["ssn"][-4:]}
    return None


class Guard(BasePlugin):
    """A plugin guard with the agent's rule."""

    async def before_tool_callback(self, *, tool: Any, tool_args: dict[str, Any],
                                   tool_context: Any) -> dict[str, Any] | None:
        return agent_guard(tool, tool_args, tool_context)


async def main() -> None:
    policy = HealPolicy(rerun_safe_calls=True, tool_effects={
        "get_weather": ToolEffect.READ_ONLY, "charge_card": ToolEffect.SIDE_EFFECT,
        "read_customer": ToolEffect.READ_ONLY})
    inner = InMemorySessionService()
    history = History(agent=AGENT, start=time.time() - 600)
    history.user("weather in Paris, and pay my order")
    history.calls(("get_weather", {"city": "Paris"}), ("charge_card", {"amount": 42}),
                  ("read_customer", {"customer": "someone-else"}),
                  ("read_customer", {"customer": USER}),
                  ids=["wx-1", "pay-1", "rc-1", "rc-2"])
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in history.events:
        await inner.append_event(session, event)
    model = ScriptedModel(script=[ScriptedModel.say("Here you go.")],
                          validate=lambda contents: [])  # record whatever ADK sends
    agent = LlmAgent(name=AGENT, model=model, tools=[get_weather, charge_card, read_customer],
                     before_tool_callback=agent_guard, after_tool_callback=agent_mask)
    runner = Runner(app_name=APP, agent=agent,
                    session_service=HealingSessionService(inner, policy),
                    plugins=[RerunSafeCallsPlugin(policy), Guard(name="guard")])
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
    in_clear = SSN in stored.model_dump_json() or SSN in request.model_dump_json()
    if (sorted(RUNS) != ["get_weather", f"read_customer:{USER}"]
            or answers.get("wx-1") != {"city": "Paris", "temp_c": 21}
            or "error" not in answers.get("pay-1", {}) or answers.get("rc-1") != REFUSAL
            or answers.get("rc-2") != {"customer": USER, "ssn": "***-**-6789"} or in_clear
            or line["request_problems"]
            or not responses or max(responses) > words.index("hello?")):
        sys.exit(f"rerun: {line}")


if __name__ == "__main__":
    asyncio.run(main())
