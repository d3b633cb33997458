"""What the installed ADK sends the model once a late result has superseded a heal.

``python late_check.py`` (with adk-session-heal installed beside that ADK), over
that ADK's ``InMemorySessionService`` behind ``HealingSessionService``:

* ``stored elsewhere``: ``user, call, user2, reply2`` is healed on read; another
  replica then stores the call's real response (through the bare service);
  one more turn (``user3``) runs through that ADK's real ``Runner`` with a
  scripted model that records its request. The wrapper takes the heal out as
  the runner reads the session.
* ``as the next message``: the same healed session, and the real response
  comes back as the new message of a turn (how ADK resumes a long-running
  tool). The wrapper takes the heal out right after the runner stores it.

Prints one JSON line per scenario: the ADK version, the stored order, the
order of the request the runner sent, and each provider's problems with that
request, beside the request the same ADK builds for a control session whose
call was never healed. Exits 1 unless, in both, storage holds no heal, the
request holds exactly one response to the call (the real one), breaks no
provider rule and equals the control's, and, stored elsewhere, reads user,
call, real response, user2, reply2, user3 (the model's earlier reply kept).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from adk_session_heal import HealingSessionService
from adk_session_heal.core.adk_compat import ADK_VERSION
from adk_session_heal.providers.validators import PROVIDERS, provider_problems
from adk_session_heal.testing import History, ScriptedModel, outline

APP, USER, AGENT = "late_app", "late_user", "worker"
REPLY = "Sorry, the weather tool failed."
EXPECTED = ["weather in Paris?", "call", "response:temp_c", "hello?", REPLY, "and now?"]


def real_response(call_id: str) -> types.Part:
    """The tool's real result."""
    return types.Part(function_response=types.FunctionResponse(
        id=call_id, name="get_weather", response={"temp_c": 21}))


async def crashed_session(inner: InMemorySessionService, *, heal: bool) -> tuple[str, str]:
    """Stores a crashed history, healed through the wrapper if asked: (session id, call id)."""
    history = History(agent=AGENT, start=time.time() - 3600)
    history.user("weather in Paris?")
    call_id = history.call("get_weather", {"city": "Paris"})
    history.user("hello?")
    history.text(REPLY)
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in history.events:
        await inner.append_event(session, event)
    if heal:
        await HealingSessionService(inner).get_session(
            app_name=APP, user_id=USER, session_id=session.id)
    return session.id, call_id


async def run(*, heal: bool, as_message: bool) -> tuple[list[types.Content], list[Event]]:
    """One scenario: the real response arrives, then one turn through that ADK's ``Runner``.

    Args:
        heal: Heal the call first (the runner then runs behind the wrapper); without,
            the control: what this ADK sends for a call that was never healed.
        as_message: The real response is the turn's new message; else another
            replica stores it and the user writes again.

    Returns:
        The model's request and the stored events.
    """
    inner = InMemorySessionService()
    session_id, call_id = await crashed_session(inner, heal=heal)
    message = types.Content(role="user", parts=[real_response(call_id)])
    if not as_message:
        replica = await inner.get_session(app_name=APP, user_id=USER, session_id=session_id)
        assert replica is not None
        await inner.append_event(replica, Event(
            invocation_id=replica.events[1].invocation_id, author=AGENT, content=message))
        message = types.Content(role="user", parts=[types.Part(text="and now?")])
    model = ScriptedModel(script=[ScriptedModel.say("It is 21 degrees in Paris.")],
                          validate=lambda contents: [])  # record whatever ADK sends
    service = HealingSessionService(inner) if heal else inner
    runner = Runner(app_name=APP, agent=LlmAgent(name=AGENT, model=model),
                    session_service=service)
    async for _ in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
        pass
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert stored is not None
    (request,) = model.requests
    return request.contents, stored.events


async def main() -> None:
    failures: list[str] = []
    for scenario, as_message in (("stored elsewhere", False), ("as the next message", True)):
        request, stored = await run(heal=True, as_message=as_message)
        control, _ = await run(heal=False, as_message=as_message)
        line = {
            "adk": ".".join(map(str, ADK_VERSION)),
            "scenario": scenario,
            "stored": outline(stored),
            "runner_request": outline(request),
            "never_healed_request": outline(control),
            "request_problems": [x.code for p in PROVIDERS
                                 for x in provider_problems(request, p)],
            "heals_stored": sum(1 for e in stored
                                if (e.custom_metadata or {}).get("adk_session_heal")),
        }
        print(json.dumps(line))
        responses = [w for w in outline(request) if w.startswith("response:")]
        same = [c.model_dump() for c in request] == [c.model_dump() for c in control]
        if (responses != ["response:temp_c"] or line["request_problems"]
                or line["heals_stored"] or not same
                or (not as_message and line["runner_request"] != EXPECTED)):
            failures.append(f"{scenario}: {line} (same as never healed: {same})")
    if failures:
        sys.exit("late: " + " | ".join(failures))


if __name__ == "__main__":
    asyncio.run(main())
