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
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.adk.sessions import BaseSessionService, DatabaseSessionService
from rich.console import Console
from rich.table import Table

from ..core.event_access import ADK_EVENTS
from ..core.findings import CallStatus, classify
from ..policy import HealPolicy, ToolEffect
from ..runtime.service import HealingSessionService
from ..testing import (
    APP_NAME,
    CRASH_EXIT_CODE,
    USER_ID,
    crash_turn,
    describe_event,
    resume_turn,
    spawn_crash,
)

DEMO_POLICY = HealPolicy(tool_effects={"get_weather": ToolEffect.READ_ONLY})
"""The demo's policy: ``get_weather`` only reads, so a heal says a retry is safe."""


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
