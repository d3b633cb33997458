"""What the installed ADK sends the model for a heal stored after a later turn.

``python order_check.py`` (with adk-session-heal installed beside that ADK):
stores ``user, call, user2, reply2`` in an append-path service (ADK's
in-memory service with ``append_event`` overridden: heals go at the end),
lets the wrapper heal it (``get_session``), then runs one more turn
(``user3``) through that ADK's real ``Runner`` with a scripted model that
records its request. Prints one JSON line: the ADK version, the stored order,
the order of the request the runner sent, the order
:func:`adk_session_heal.providers.validators.adk_request_contents` builds (that ADK's
contents processor), and each provider's problems with that request and with
the stored order. Exits 1 unless the request reads user, call, heal, user2,
reply2, user3, passes every provider rule, and equals what the helper builds.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.genai import types

from adk_session_heal import HealingSessionService
from adk_session_heal.core.adk_compat import ADK_VERSION
from adk_session_heal.providers.validators import PROVIDERS, adk_request_contents, provider_problems
from adk_session_heal.testing import History, ScriptedModel, outline

APP, USER, AGENT = "order_app", "order_user", "worker"
EXPECTED = ["weather in Paris?", "call", "response:error", "hello?", "Hi! What can I do for you?",
            "and now?"]
"""The request's order: the heal right after its call, then the later turns."""


class AppendingInMemoryService(InMemorySessionService):
    """ADK's in-memory service behind its own ``append_event`` (the append path)."""

    async def append_event(self, session: Session, event: Event) -> Event:
        return await super().append_event(session, event)


async def main() -> None:
    inner = AppendingInMemoryService()
    history = History(agent=AGENT, start=time.time() - 3600)
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})
    history.user("hello?")
    history.text("Hi! What can I do for you?")
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in history.events:
        await inner.append_event(session, event)
    wrapper = HealingSessionService(inner)
    await wrapper.get_session(app_name=APP, user_id=USER, session_id=session.id)

    model = ScriptedModel(script=[ScriptedModel.say("Still no weather, sorry.")],
                          validate=lambda contents: [])  # record whatever ADK sends
    agent = LlmAgent(name=AGENT, model=model)
    runner = Runner(app_name=APP, agent=agent, session_service=wrapper)
    message = types.Content(role="user", parts=[types.Part(text="and now?")])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    before_reply = stored.model_copy(update={"events": stored.events[:-1]})
    helper = await adk_request_contents(before_reply, agent)
    (request,) = model.requests
    report = {
        "adk": ".".join(map(str, ADK_VERSION)),
        "stored": outline(before_reply.events),
        "runner_request": outline(request.contents),
        "helper_request": outline(helper),
        "request_problems": [x.code for p in PROVIDERS
                             for x in provider_problems(request.contents, p)],
        "stored_problems": {p: [x.code for x in provider_problems(before_reply.events, p)]
                            for p in PROVIDERS},
    }
    print(json.dumps(report))
    same = [c.model_dump() for c in helper] == [c.model_dump() for c in request.contents]
    if report["runner_request"] != EXPECTED or report["request_problems"] or not same:
        sys.exit(f"order: the request ADK sent reads {report['runner_request']} with "
                 f"{report['request_problems']}; the helper built it the same: {same}")


if __name__ == "__main__":
    asyncio.run(main())
