"""The demo: crash a real ADK run mid-tool, show the dead call, heal it, resume.

Everything is real but the model: an ADK ``Runner`` with an ``LlmAgent`` and a
``DatabaseSessionService`` on an embedded SQLite file, and a scripted offline
model (:class:`~adk_session_heal.testing.ScriptedModel`) that rejects any
history a strict provider would reject.

1. A child process starts a turn; the model calls ``get_weather``; the tool
   kills its process with ``os._exit`` before it can answer. Storage keeps an
   unanswered call.
2. The stored history is shown, classified by the pure core.
   The call is ``in_flight``: nothing stored after it says its turn is over,
   so for all a reader can tell the tool is still running (on another replica,
   say), and it is never healed.
3. A fresh runner over ``HealingSessionService`` takes the user's next message.
   The message starts a new invocation, which proves the crashed one over: the
   call is now ``superseded`` (dead for sure) and is healed in storage before the
   message is stored, and the model's very next request shows it the failed
   tool. The demo declares ``get_weather`` ``read_only`` (:data:`DEMO_POLICY`),
   so the heal tells the model a retry is safe.

Run it with ``adk-session-heal demo`` (or ``python -m adk_session_heal demo``);
``--keep`` keeps the database and prints where it is.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, DatabaseSessionService, Session
from google.genai import types
from rich.console import Console
from rich.table import Table

from .event_access import ADK_EVENTS
from .findings import CallStatus, classify
from .policy import HealPolicy, ToolEffect
from .service import HealingSessionService
from .testing import ScriptedModel

__all__ = [
    "APP_NAME",
    "CRASH_ENV",
    "CRASH_EXIT_CODE",
    "DEMO_POLICY",
    "USER_ID",
    "DemoResult",
    "build_runner",
    "crash_turn",
    "describe_event",
    "get_weather",
    "offline_weather_model",
    "resume_turn",
    "run_demo",
    "spawn_crash",
    "temporary_sqlite_database",
    "temporary_sqlite_url",
    "weather_agent",
    "weather_reply",
]

APP_NAME = "weather_app"
USER_ID = "demo-user"
CRASH_ENV = "ADK_SESSION_HEAL_DEMO_CRASH"
CRASH_EXIT_CODE = 17
DEMO_POLICY = HealPolicy(tool_effects={"get_weather": ToolEffect.READ_ONLY})
"""The demo's policy: ``get_weather`` only reads, so a heal says a retry is safe."""


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
        [sys.executable, "-m", "adk_session_heal.demo", "crash", db_url, session_id],
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


def history_table(title: str, events: Sequence[Any]) -> Table:
    """Renders a session's events, one row each, with each call's status."""
    findings = classify(events, ADK_EVENTS, now=time.time())
    status_by_event: dict[int, str] = {}
    for finding in findings.calls:
        status_by_event[finding.event_index] = finding.status.value
    table = Table(title=title, show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("author")
    table.add_column("invocation")
    table.add_column("content")
    table.add_column("call status")
    for index, event in enumerate(events):
        synthetic = " (synthetic)" if (event.custom_metadata or {}).get("adk_session_heal") else ""
        table.add_row(
            str(index + 1),
            event.author + synthetic,
            event.invocation_id[-8:],
            describe_event(event),
            status_by_event.get(index, ""),
        )
    return table


async def run_demo(
    console: Console | None = None, workdir: Path | None = None, *, keep: bool = False
) -> int:
    """Runs the whole demo and prints it. Returns a process exit code (0 = success).

    Args:
        console: Where to print (default: the terminal).
        workdir: The folder of the database (default: a new temporary one).
        keep: Keep the database afterwards and say where it is; without it, a
            temporary folder is deleted at the end.
    """
    if workdir is None:
        if keep:
            return await run_demo(console, Path(tempfile.mkdtemp(prefix="adk-session-heal-demo-")),
                                  keep=True)
        with tempfile.TemporaryDirectory(prefix="adk-session-heal-demo-") as temporary:
            return await run_demo(console, Path(temporary))
    console = console or Console()
    db_url = f"sqlite+aiosqlite:///{workdir / 'sessions.db'}"
    bare = DatabaseSessionService(db_url)
    try:
        session = await bare.create_session(app_name=APP_NAME, user_id=USER_ID)
        console.print(f"[bold]1. A real ADK run whose tool crashes its process[/] ({db_url})")
        code = spawn_crash(db_url, session.id)
        console.print(f"   child process exited with code {code} in the middle of get_weather")
        stored = await bare.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=session.id)
        assert stored is not None
        console.print(history_table("2. Stored history after the crash", stored.events))
        console.print("   in_flight: nothing stored after the call says its turn is over, so for "
                      "all a reader can tell the tool is still running (on another replica, "
                      "say). A call in flight is never healed.")
        console.print("[bold]3. The user comes back; the runner uses HealingSessionService[/]")
        console.print("   The new message starts a new invocation, which proves the crashed one "
                      "over: the call is superseded (dead for sure) and healed before the "
                      "message is stored. get_weather is declared read_only, so the heal says "
                      "a retry is safe.")
        result = await resume_turn(HealingSessionService(bare, DEMO_POLICY), session.id, "hello?")
        console.print(history_table("Stored history after the next turn", result.session.events))
        seen = [
            part.function_response.response
            for content in result.first_request.contents
            for part in content.parts or ()
            if part.function_response is not None
        ]
        console.print(f"   the model's next request held the tool outcome: {seen}")
        dead = [
            c for c in classify(result.session.events, now=time.time()).calls
            if c.status in (CallStatus.SUPERSEDED, CallStatus.STALE)
        ]
        ok = code == CRASH_EXIT_CODE and bool(result.heals) and not dead and bool(seen)
        if keep:
            console.print(f"   The database is kept: {workdir / 'sessions.db'} (read it with "
                          f"`adk-session-heal scan {db_url}`; delete {workdir} when done).",
                          soft_wrap=True)
        console.print("[green]healed[/]" if ok else "[red]demo did not heal as expected[/]")
        return 0 if ok else 1
    finally:
        await bare.close()


async def _resume_and_report(db_url: str, session_id: str, healing: bool) -> dict[str, Any]:
    """Resumes the session in this process and summarises what happened, as JSON data."""
    inner = DatabaseSessionService(db_url)
    try:
        service: BaseSessionService = HealingSessionService(inner) if healing else inner
        result = await resume_turn(service, session_id, "hello?")
        return {
            "events": [
                {
                    "id": e.id,
                    "author": e.author,
                    "synthetic": bool((e.custom_metadata or {}).get("adk_session_heal")),
                    "calls": [c.name for c in e.get_function_calls()],
                    "responses": [r.response for r in e.get_function_responses()],
                }
                for e in result.session.events
            ],
            "request_calls": [
                p.function_call.name
                for c in result.first_request.contents
                for p in c.parts or ()
                if p.function_call is not None
            ],
            "request_responses": [
                p.function_response.response
                for c in result.first_request.contents
                for p in c.parts or ()
                if p.function_response is not None
            ],
            "heals": len(result.heals),
        }
    finally:
        await inner.close()


def _main(argv: Sequence[str]) -> int:
    if len(argv) == 3 and argv[0] == "crash":
        asyncio.run(crash_turn(argv[1], argv[2]))
        return 0
    if len(argv) == 3 and argv[0] in ("resume", "resume-bare"):
        report = asyncio.run(_resume_and_report(argv[1], argv[2], argv[0] == "resume"))
        print(json.dumps(report))
        return 0
    return asyncio.run(run_demo())


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
