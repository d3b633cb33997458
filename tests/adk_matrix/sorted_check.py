"""A heal written through a ``DatabaseSessionService`` subclass's own ``append_event``.

``python sorted_check.py`` (with adk-session-heal installed beside that ADK):
a subclass of that ADK's ``DatabaseSessionService`` that overrides
``append_event`` (as an encrypting store does: the direct writer refuses it)
stores ``user, call, user2, reply2`` on SQLite. That ADK's real ``Runner``
then runs one more turn (``user3``) through ``HealingSessionService``: the
wrapper heals as the runner reads the session, which moves the session's update
time back to the heal's. Prints one JSON line: the ADK version, the stored
order, the order of the model's request, and what a session object read before
the heal gets when it appends afterwards (that ADK's stale-session check).
Exits 1 unless the heal is stored right after its call (``user, call, heal,
user2, reply2, user3, reply3``), the stored order and the request pass every
provider rule, and the runner's own appends after the heal succeeded.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService, Session
from google.genai import types
from matrix_adk import emit, fail

from adk_session_heal import HealingSessionService, HealPolicy
from adk_session_heal.core.adk_compat import ADK_VERSION
from adk_session_heal.providers.validators import PROVIDERS, provider_problems
from adk_session_heal.testing import History, ScriptedModel, outline

APP, USER, AGENT = "sorted_app", "sorted_user", "worker"
STORED = ["weather in Paris?", "call", "response:error", "hello?", "Hi! What can I do for you?",
          "and now?", "Still no weather, sorry."]


class AppendingDatabaseService(DatabaseSessionService):
    """That ADK's database service behind its own ``append_event``."""

    async def append_event(self, session: Session, event: Event) -> Event:
        return await super().append_event(session, event)


async def main(url: str) -> None:
    inner = AppendingDatabaseService(url)
    history = History(agent=AGENT, start=time.time() - 3600)
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})
    history.user("hello?")
    history.text("Hi! What can I do for you?")
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in history.events:
        await inner.append_event(session, event)
    before_heal = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert before_heal is not None

    model = ScriptedModel(script=[ScriptedModel.say("Still no weather, sorry.")],
                          validate=lambda contents: [])  # record whatever ADK sends
    runner = Runner(app_name=APP, agent=LlmAgent(name=AGENT, model=model),
                    session_service=HealingSessionService(inner, HealPolicy(quiet_after=0)))
    message = types.Content(role="user", parts=[types.Part(text="and now?")])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    late = Event(author="user", invocation_id="late",
                 content=types.Content(role="user", parts=[types.Part(text="late")]))
    try:
        await inner.append_event(before_heal, late)
        stale_copy = "appended"
    except Exception as exc:  # which stale-session error this ADK raises is what is reported
        stale_copy = type(exc).__name__
    await inner.close()

    (request,) = model.requests
    report = {
        "adk": ".".join(map(str, ADK_VERSION)),
        "stored": outline(stored.events),
        "request": outline(request.contents),
        "stored_problems": [x.code for p in PROVIDERS for x in provider_problems(stored.events, p)],
        "request_problems": [x.code for p in PROVIDERS
                             for x in provider_problems(request.contents, p)],
        "copy_read_before_the_heal": stale_copy,
    }
    emit(report)
    if report["stored"] != STORED or report["request"] != STORED[:-1]:
        fail(f"the heal is not right after its call: stored {report['stored']}, "
             f"request {report['request']}")
    if report["stored_problems"] or report["request_problems"]:
        fail(f"provider problems: stored {report['stored_problems']}, "
             f"request {report['request_problems']}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        asyncio.run(main(f"sqlite+aiosqlite:///{Path(scratch) / 'sorted.db'}"))
