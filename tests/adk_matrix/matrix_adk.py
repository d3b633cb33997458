"""What the matrix drivers share: an offline model, the weather agent, turns, checks.

These drivers run inside one google-adk version's own virtual environment
(1.22 up to the newest 2.x), so they use only that ADK's public API, the
standard library and SQLAlchemy, and nothing of this repository's test suite.

The agent answers "weather in <city>" with a ``get_weather`` call; the tool
kills its process (``os._exit``) when asked about :data:`CRASH_CITY`, after ADK
stored the call and before any response, as a crash or an OOM kill would.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, Session
from google.genai import types

USER_ID = "matrix-user"
CRASH_CITY = "Paris"
CRASH_EXIT_CODE = 17
HEAL_MARKER = "adk_session_heal"
HEAL_PAYLOAD = {
    "error": "Tool execution was interrupted; it may have completed. Check the system before "
             "retrying; do not repeat it blindly.",
    "outcome": "unknown",
    "safe_to_retry": False,
}
AGENT_NAME = "weather_agent"

REQUESTS: list[LlmRequest] = []
"""Every request the offline model received in this process, in order."""

_WEATHER = re.compile(r"weather in (\w+)", re.IGNORECASE)


class CheckFailed(Exception):
    """A matrix check did not hold; its message is the one line the table shows."""


def session_id_for(app_name: str) -> str:
    """Returns the id of the one session the matrix writes for an app."""
    return f"s-{app_name}"


def get_weather(city: str) -> dict[str, Any]:
    """Returns the weather for a city; kills the process for the crash city.

    Args:
        city: The city.

    Returns:
        The forecast.
    """
    if city == CRASH_CITY:
        os._exit(CRASH_EXIT_CODE)
    return {"city": city, "forecast": "sunny"}


def _reply(request: LlmRequest) -> LlmResponse:
    last = request.contents[-1] if request.contents else None
    parts = list(last.parts or ()) if last is not None else []
    if any(p.function_response is not None for p in parts):
        return _text("Here is what the tool said.")
    match = _WEATHER.search(" ".join(p.text or "" for p in parts))
    if match:
        call = types.FunctionCall(name="get_weather", args={"city": match.group(1)})
        return LlmResponse(content=types.Content(role="model",
                                                 parts=[types.Part(function_call=call)]))
    return _text("Hello again!")


def _text(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


class OfflineModel(BaseLlm):
    """A scripted offline model that records every request it receives."""

    model: str = "matrix-offline-model"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Records the request and yields the scripted reply to it."""
        REQUESTS.append(llm_request.model_copy(deep=True))
        yield _reply(llm_request)


def build_runner(service: BaseSessionService, app_name: str) -> Runner:
    """Returns a runner of the weather agent over ``service``."""
    agent = LlmAgent(name=AGENT_NAME, model=OfflineModel(),
                     instruction="Answer weather questions with get_weather.",
                     tools=[get_weather])
    return Runner(app_name=app_name, agent=agent, session_service=service)


async def run_turn(runner: Runner, session_id: str, text: str) -> None:
    """Runs one user turn to its end."""
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id=USER_ID, session_id=session_id,
                                    new_message=message):
        pass


def call_parts(event: Any) -> list[types.FunctionCall]:
    """Returns an event's function calls."""
    parts = event.content.parts if event.content is not None else None
    return [p.function_call for p in parts or () if p.function_call is not None]


def response_parts(event: Any) -> list[types.FunctionResponse]:
    """Returns an event's function responses."""
    parts = event.content.parts if event.content is not None else None
    return [p.function_response for p in parts or () if p.function_response is not None]


def crash_call_index(session: Session) -> int:
    """Returns the index of the event holding the crashed ``get_weather`` call."""
    found = [i for i, e in enumerate(session.events)
             if any((c.args or {}).get("city") == CRASH_CITY for c in call_parts(e))]
    if len(found) != 1:
        raise CheckFailed(f"expected one crashed call event, found {len(found)}")
    return found[0]


def describe(events: Sequence[Any]) -> str:
    """Returns a short one-line picture of an event list (for failure messages)."""
    shown = []
    for e in events:
        if call_parts(e):
            shown.append("call")
        elif response_parts(e):
            shown.append("heal" if e.id.endswith("-heal") else "response")
        elif e.content is not None and e.content.parts:
            shown.append(f"{e.author}:text")
        else:
            shown.append(f"{e.author}:other")
    return ", ".join(shown)


def check_healed_after_call(session: Session, *, tail: Sequence[str] = ()) -> Any:
    """Checks the heal event follows the crashed call directly, and what follows it.

    Args:
        session: The session as ADK read it.
        tail: Authors expected after the heal, in order (``user`` then the
            agent after one more turn), checked by position.

    Returns:
        The heal event.

    Raises:
        CheckFailed: The heal is missing, misplaced or malformed.
    """
    events = session.events
    index = crash_call_index(session)
    call_event = events[index]
    (call,) = call_parts(call_event)
    heals = [e for e in events if e.id == f"{call_event.id}-heal"]
    if len(heals) != 1:
        raise CheckFailed(f"{len(heals)} heal events with id {call_event.id}-heal "
                          f"(events: {describe(events)})")
    if index + 1 >= len(events) or events[index + 1].id != heals[0].id:
        raise CheckFailed(f"heal does not sort right after its call: {describe(events)}")
    heal = heals[0]
    responses = response_parts(heal)
    response = responses[0] if len(responses) == 1 else None
    if response is None or response.id != call.id or response.name != call.name:
        raise CheckFailed(f"heal does not answer call {call.id}: {response!r}")
    if response.response != HEAL_PAYLOAD:
        raise CheckFailed(f"heal payload is {response.response!r}")
    marker = (heal.custom_metadata or {}).get(HEAL_MARKER)
    if not isinstance(marker, dict) or marker.get("synthetic") is not True:
        raise CheckFailed(f"heal has no synthetic marker: {heal.custom_metadata!r}")
    if heal.author != call_event.author or heal.invocation_id != call_event.invocation_id:
        raise CheckFailed("heal's author or invocation differs from its call's")
    after = [e.author for e in events[index + 2:]]
    if tail and after != list(tail):
        raise CheckFailed(f"after the heal: {after}, expected {list(tail)} "
                          f"(events: {describe(events)})")
    return heal


def check_request_pairs_crash(request: LlmRequest) -> None:
    """Checks a model request shows the crashed call followed by its heal response.

    ADK strips its own ``adk-`` call ids from requests, so the pair is checked
    by position, name and arguments, as a provider reads it.

    Raises:
        CheckFailed: The call is missing, or is not followed by the heal payload.
    """
    contents = list(request.contents)
    for i, content in enumerate(contents):
        calls = [p.function_call for p in content.parts or () if p.function_call]
        if not any((c.args or {}).get("city") == CRASH_CITY for c in calls):
            continue
        following = contents[i + 1] if i + 1 < len(contents) else None
        answers = [p.function_response for p in (following.parts or ()) if
                   p.function_response] if following is not None else []
        if len(answers) != 1 or answers[0].name != "get_weather" or (
                answers[0].response != HEAL_PAYLOAD):
            raise CheckFailed(f"the request's crashed call is followed by {following!r:.200}")
        return
    roles = [c.role for c in contents]
    raise CheckFailed(f"the request holds no crashed call (content roles {roles})")


def first_line(exc: BaseException) -> str:
    """Returns an exception's type and first line (pydantic's: with the failing field)."""
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    shown = lines[0] if lines else ""
    if "validation error" in shown and len(lines) > 1:
        shown += f" / {lines[1]}"
    return f"{type(exc).__name__}: {shown}"


def emit(document: dict[str, Any]) -> None:
    """Prints the driver's result document as the last line of stdout."""
    sys.stdout.flush()
    print(json.dumps(document), flush=True)


def fail(message: str) -> None:
    """Prints one failure line on stderr and exits 1."""
    print(f"FAIL: {message}", file=sys.stderr, flush=True)
    sys.exit(1)
