"""Builders for ADK event histories, for this package's tests and for yours.

Example::

    history = History()
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})   # the process dies here
    history.user("hello?")                           # next turn, new invocation
    events = history.events                          # list[google.adk.events.Event]

Each :meth:`History.user` starts a new invocation; events get deterministic
ids (``e-0001``, ...) and strictly increasing timestamps, so histories compare
equal across runs.

Offline models: :class:`ScriptedModel` replays a script of replies to
``run_async`` requests (:mod:`~adk_session_heal.testing.scripted`), and
:class:`ScriptedLiveModel` scripts the model's side of ``run_live``
connections (:mod:`~adk_session_heal.testing.live`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.auth.auth_tool import AuthConfig
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, DatabaseSessionService, Session
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

from ..runtime.service import HealingSessionService
from .live import LiveScript, LiveSent, ScriptedLiveConnection, ScriptedLiveModel
from .scripted import ProviderRejected, ScriptedModel, unpaired_tool_calls

__all__ = [
    "APP_NAME",
    "CRASH_ENV",
    "CRASH_EXIT_CODE",
    "DemoResult",
    "History",
    "LiveScript",
    "LiveSent",
    "ProviderRejected",
    "ScriptedLiveConnection",
    "ScriptedLiveModel",
    "ScriptedModel",
    "USER_ID",
    "build_runner",
    "crash_turn",
    "describe_event",
    "get_weather",
    "offline_weather_model",
    "outline",
    "resume_turn",
    "spawn_crash",
    "temporary_sqlite_database",
    "temporary_sqlite_url",
    "unpaired_tool_calls",
    "weather_agent",
    "weather_reply",
]


class History:
    """Builds a session's event list turn by turn.

    Args:
        agent: Author of model events.
        start: Timestamp of the first event.
        step: Seconds between consecutive events.
    """

    def __init__(self, *, agent: str = "assistant", start: float = 1_700_000_000.0,
                 step: float = 1.0) -> None:
        self.agent = agent
        self.events: list[Event] = []
        self._clock = start
        self._step = step
        self._invocations = 0
        self._calls = 0
        self.invocation_id = ""

    # -- plumbing ---------------------------------------------------------

    def _add(self, **fields: Any) -> Event:
        fields.setdefault("invocation_id", self.invocation_id)
        fields.setdefault("author", self.agent)
        event = Event(id=f"e-{len(self.events) + 1:04d}", timestamp=self._clock, **fields)
        self._clock += self._step
        self.events.append(event)
        return event

    def new_call_id(self) -> str:
        """Returns a fresh call id (``call-1``, ``call-2``, ...)."""
        self._calls += 1
        return f"call-{self._calls}"

    # -- turns ------------------------------------------------------------

    def user(self, text: str, *, invocation_id: str | None = None) -> Event:
        """Appends a user message, starting a new invocation unless one is given."""
        if invocation_id is None:
            self._invocations += 1
            invocation_id = f"inv-{self._invocations}"
        self.invocation_id = invocation_id
        return self._add(
            author="user",
            content=types.Content(role="user", parts=[types.Part(text=text)]),
        )

    def text(self, text: str, *, author: str | None = None) -> Event:
        """Appends a model text reply."""
        return self._add(
            author=author or self.agent,
            content=types.Content(role="model", parts=[types.Part(text=text)]),
        )

    def calls(
        self,
        *calls: tuple[str, Mapping[str, Any]] | str,
        ids: Iterable[str | None] | None = None,
        long_running: bool = False,
        author: str | None = None,
        branch: str | None = None,
    ) -> list[str | None]:
        """Appends one model event holding one or more function calls.

        Args:
            *calls: ``name`` or ``(name, args)`` per call.
            ids: Explicit call ids (``None`` for an id-less call); fresh ids
                otherwise.
            long_running: Mark every call long-running.
            author: Author of the event (default: the agent).
            branch: Branch of the event.

        Returns:
            The call ids, in order.
        """
        normalized = [(c, {}) if isinstance(c, str) else c for c in calls]
        call_ids: list[str | None] = (
            list(ids) if ids is not None else [self.new_call_id() for _ in normalized]
        )
        parts = [
            types.Part(function_call=types.FunctionCall(id=call_id, name=name, args=dict(args)))
            for (name, args), call_id in zip(normalized, call_ids, strict=True)
        ]
        self._add(
            author=author or self.agent,
            branch=branch,
            content=types.Content(role="model", parts=parts),
            long_running_tool_ids={i for i in call_ids if i} if long_running else None,
        )
        return call_ids

    def call(self, name: str, args: Mapping[str, Any] | None = None, *,
             call_id: str | None = None, long_running: bool = False) -> str:
        """Appends a model event with one function call and returns its id."""
        ids = [call_id] if call_id is not None else None
        (result,) = self.calls((name, args or {}), ids=ids, long_running=long_running)
        assert result is not None
        return result

    def respond(
        self,
        *answers: tuple[str | None, str] | tuple[str | None, str, Mapping[str, Any]],
        author: str | None = None,
        pending: bool = False,
    ) -> Event:
        """Appends one event holding function responses.

        Args:
            *answers: ``(call_id, name)`` or ``(call_id, name, response)``.
            author: Author of the event (default: the agent).
            pending: Mark each answered id as awaiting a tool confirmation (ADK's
                placeholder response for a tool that asked for confirmation).

        Returns:
            The event.
        """
        parts = []
        for answer in answers:
            call_id, name = answer[0], answer[1]
            response = dict(answer[2]) if len(answer) > 2 else {"result": "ok"}
            parts.append(
                types.Part(
                    function_response=types.FunctionResponse(id=call_id, name=name,
                                                             response=response)
                )
            )
        actions = EventActions()
        if pending:
            actions.requested_tool_confirmations = {
                a[0]: ToolConfirmation(hint="confirm?") for a in answers if a[0]
            }
        return self._add(
            author=author or self.agent,
            content=types.Content(role="user", parts=parts),
            actions=actions,
        )

    def request_credential(self, call_id: str) -> Event:
        """Appends a response event whose call awaits a credential (ADK auth flow)."""
        from google.adk.auth.auth_credential import AuthCredentialTypes  # noqa: F401

        actions = EventActions(
            requested_auth_configs={call_id: AuthConfig.model_construct()},
        )
        return self._add(actions=actions)

    def rewind(self, before_invocation_id: str) -> Event:
        """Appends a rewind event annulling ``before_invocation_id`` and after."""
        self._invocations += 1
        self.invocation_id = f"inv-{self._invocations}"
        return self._add(
            author="user",
            actions=EventActions(rewind_before_invocation_id=before_invocation_id),
        )

    def compaction(self, summary: str = "summary") -> Event:
        """Appends a compaction summary event over everything so far."""
        first = self.events[0].timestamp if self.events else self._clock
        return self._add(
            author="user",
            actions=EventActions(
                compaction=EventCompaction(
                    start_timestamp=first,
                    end_timestamp=self._clock,
                    compacted_content=types.Content(
                        role="model", parts=[types.Part(text=summary)]
                    ),
                )
            ),
        )


def outline(history: Iterable[Event | types.Content]) -> list[str]:
    """Returns one word per event or content with one, to assert an order in one line.

    The word is the first part's text, ``"call"`` for a function call, or for
    a function response ``"response:error"`` when it reports a failure (an
    ``error`` key, as every heal has) and ``"response:<keys of the response>"``
    otherwise. Events without content are left out.

    Args:
        history: ADK ``Event`` objects (a session) or ``types.Content`` objects
            (a request's contents).
    """
    words: list[str] = []
    for item in history:
        content = item.content if isinstance(item, Event) else item
        if content is None or not content.parts:
            continue
        part = content.parts[0]
        if part.function_call is not None:
            words.append("call")
        elif part.function_response is not None:
            payload = part.function_response.response or {}
            words.append("response:" + ("error" if "error" in payload else ",".join(payload)))
        else:
            words.append(part.text or "")
    return words


# The weather agent: an offline model, a tool that can crash its process, and the
# harness that crashes a real run mid-tool (the demo and the examples are built on it).

APP_NAME = "weather_app"
USER_ID = "demo-user"
CRASH_ENV = "ADK_SESSION_HEAL_DEMO_CRASH"
CRASH_EXIT_CODE = 17


def get_weather(city: str) -> dict[str, Any]:
    """Returns the weather for a city (the demo's tool; it can crash its process).

    Args:
        city: The city.

    Returns:
        The forecast.
    """
    if os.environ.get(CRASH_ENV) == "1":
        os._exit(CRASH_EXIT_CODE)  # the process dies mid-call: no response is stored
    return {"city": city, "forecast": "sunny", "celsius": 21}


def _after_tool_reply(request: LlmRequest) -> LlmResponse:
    """The model's reply once it sees the tool's outcome."""
    for content in reversed(request.contents):
        for part in content.parts or ():
            if part.function_response is not None:
                response = part.function_response.response or {}
                if "error" in response and response.get("safe_to_retry") is True:
                    return ScriptedModel.say(
                        "Sorry, fetching the weather was interrupted; asking again is safe. "
                        "Shall I?"
                    )
                if "error" in response:
                    return ScriptedModel.say(
                        "Sorry, fetching the weather failed. Shall I try again?"
                    )
                return ScriptedModel.say(f"It is {response.get('forecast')} there.")
    return ScriptedModel.say("Hello again!")


def weather_reply(request: LlmRequest) -> LlmResponse:
    """The weather agent's offline reply to any request, for multi-turn use.

    A user message mentioning the weather gets a ``get_weather`` call; anything
    else gets the tool's latest outcome (or a greeting) in words.
    """
    last = request.contents[-1] if request.contents else None
    if last is not None and last.role == "user":
        text = " ".join(part.text or "" for part in last.parts or ())
        if "weather" in text.lower():
            return ScriptedModel.call("get_weather", {"city": "Paris"})
    return _after_tool_reply(request)


def offline_weather_model(turns: int = 10_000) -> ScriptedModel:
    """Returns a scripted model answering up to ``turns`` requests with :func:`weather_reply`."""
    return ScriptedModel(script=[weather_reply] * turns)


def weather_agent(model: ScriptedModel, name: str = "weather_agent") -> LlmAgent:
    """Returns the demo's weather agent (its ``get_weather`` tool can crash its process)."""
    return LlmAgent(
        name=name,
        model=model,
        instruction="Answer weather questions with the get_weather tool.",
        tools=[get_weather],
    )


def build_runner(service: BaseSessionService, model: ScriptedModel) -> Runner:
    """Returns a runner for the demo's weather agent."""
    return Runner(app_name=APP_NAME, agent=weather_agent(model), session_service=service)


async def _run_turn(runner: Runner, session_id: str, text: str) -> None:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id=USER_ID, session_id=session_id, new_message=message):
        pass


async def crash_turn(db_url: str, session_id: str) -> None:
    """Runs the turn whose tool crashes (call it in a child process with CRASH_ENV=1)."""
    service = DatabaseSessionService(db_url)
    model = ScriptedModel(script=[ScriptedModel.call("get_weather", {"city": "Paris"})])
    await _run_turn(build_runner(service, model), session_id, "What's the weather in Paris?")


def temporary_sqlite_url() -> str:
    """Returns the URL of a new SQLite file in a fresh temporary directory."""
    directory = Path(tempfile.mkdtemp(prefix="adk-session-heal-"))
    return f"sqlite+aiosqlite:///{directory / 'sessions.db'}"


@contextmanager
def temporary_sqlite_database() -> Iterator[str]:
    """Yields the URL of a new SQLite file in a temporary directory, deleted afterwards."""
    with tempfile.TemporaryDirectory(prefix="adk-session-heal-") as directory:
        yield f"sqlite+aiosqlite:///{Path(directory) / 'sessions.db'}"


def spawn_crash(db_url: str, session_id: str) -> int:
    """Runs :func:`crash_turn` in a child process that dies mid-tool.

    Returns:
        The child's exit code (``17`` when the tool crashed it, as intended).
    """
    env = {**os.environ, CRASH_ENV: "1"}
    completed = subprocess.run(
        [sys.executable, "-m", "adk_session_heal.testing", "crash", db_url, session_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return completed.returncode


@dataclass(frozen=True)
class DemoResult:
    """What the resumed turn produced.

    Attributes:
        session: The session as stored after the turn.
        first_request: The model's first request of the resumed turn.
        heals: The heal records written.
    """

    session: Session
    first_request: LlmRequest
    heals: tuple[Any, ...]


async def resume_turn(service: BaseSessionService, session_id: str, text: str) -> DemoResult:
    """Runs the user's next turn over ``service`` (normally a HealingSessionService)."""
    heals: list[Any] = []
    if isinstance(service, HealingSessionService):
        service = HealingSessionService(
            service.inner, service.policy, on_heal=heals.append
        )
    model = ScriptedModel(script=[_after_tool_reply])
    await _run_turn(build_runner(service, model), session_id, text)
    session = await service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
    assert session is not None
    return DemoResult(session=session, first_request=model.requests[0], heals=tuple(heals))


def describe_event(event: Any) -> str:
    """Returns one line showing an event's texts, calls and responses."""
    parts = event.content.parts if event.content else []
    shown = []
    for part in parts or ():
        if part.text:
            shown.append(repr(part.text))
        elif part.function_call is not None:
            shown.append(f"function_call {part.function_call.name}({part.function_call.id})")
        elif part.function_response is not None:
            response = json.dumps(part.function_response.response)
            shown.append(f"function_response {part.function_response.name} {response}")
    return "; ".join(shown) or "(no content)"
