"""ToolRunLedgerPlugin: records each tool call's start (with a lease) and end, durably.

Opt-in: add it to an ``App``'s or ``Runner``'s plugins, with a ledger on the
session database (run ``adk-session-heal db upgrade URL`` once to create its
table)::

    ledger = SqlToolRunLedger.from_url("postgresql+asyncpg://app@db/sessions")
    runner = Runner(agent=agent, app_name="app", session_service=service,
                    plugins=[ToolRunLedgerPlugin(ledger)])

For each tool call the model makes (keyed by session and function-call id):

* when the model's call event reaches the runner (``on_event_callback``), an
  ``announced`` record with a lease: the runner is alive and about to run the
  tool. It proves, later, that a call whose tool never started did not start;
  a call with no record at all may predate the plugin, so nothing is claimed;
* before the tool runs, a ``started`` record with a lease (this host and
  process, ``lease_until = now + lease_seconds``) is committed; while the tool
  runs, a heartbeat pushes the lease forward every third of ``lease_seconds``;
* when the tool returns, ``finished`` with its result (secrets redacted, at
  most ``max_result_bytes`` kept: :func:`~adk_session_heal.tool_runs.stored_result`);
  when it raises, ``failed`` with the exception's type only.

If the start cannot be recorded, the tool does not run: the model gets an
error saying so, which is true (a tool run the ledger did not see would later
read as ``not_started`` and be called safe to retry). A failed heartbeat or
end record is logged; the tool's result reaches the model as usual.

What the records mean for a dead call is :func:`~adk_session_heal.tool_runs.run_outcome`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from .errors import HealError
from .findings import CLIENT_FUNCTION_CALL_NAMES
from .session_key import SessionKey
from .tool_runs import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_RESULT_BYTES,
    RunState,
    ToolRun,
    stored_result,
)

__all__ = ["ToolRunLedger", "ToolRunLedgerPlugin"]

logger = logging.getLogger("adk_session_heal")

NOT_RECORDED_ERROR = (
    "The tool was not run: its start could not be recorded in the tool-run ledger. "
    "It is safe to retry later."
)
"""The result the model gets when a start cannot be recorded (the tool did not run)."""


class ToolRunLedger(Protocol):
    """Where tool runs are recorded: ``SqlToolRunLedger`` or ``RedisToolRunLedger``."""

    async def announce(self, runs: Sequence[ToolRun]) -> None:
        """Records calls about to run, keeping existing records."""

    async def start(self, run: ToolRun) -> int:
        """Records a start; returns its attempt number."""

    async def renew(self, run: ToolRun, lease_until: float) -> bool:
        """Pushes a running attempt's lease forward."""

    async def finish(self, run: ToolRun, state: RunState, finished_at: float,
                     result: str | None, truncated: bool) -> bool:
        """Records how an attempt ended."""


class ToolRunLedgerPlugin(BasePlugin):
    """Records every tool call's start, lease and end in a tool-run ledger.

    Args:
        ledger: Where to record: a ``SqlToolRunLedger`` on the session
            database, or a ``RedisToolRunLedger`` beside ADK's Redis sessions.
        lease_seconds: How long a start counts as alive without a heartbeat;
            the heartbeat renews it every third of this.
        max_result_bytes: The largest result kept (bytes of JSON).
        name: The plugin's name.
        clock: Seconds since the epoch (tests pass a skewed one).
    """

    def __init__(self, ledger: ToolRunLedger, *, lease_seconds: float = DEFAULT_LEASE_SECONDS,
                 max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
                 name: str = "adk_session_heal_tool_runs",
                 clock: Callable[[], float] = time.time) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        super().__init__(name)
        self.ledger = ledger
        self.lease_seconds = float(lease_seconds)
        self.max_result_bytes = max_result_bytes
        self._clock = clock
        self._host = socket.gethostname()
        self._running: dict[tuple[SessionKey, str], tuple[ToolRun, asyncio.Task[None]]] = {}

    def _key(self, tool_context: ToolContext) -> tuple[SessionKey, str] | None:
        call_id = tool_context.function_call_id
        if not call_id:
            return None
        session = tool_context.session
        return SessionKey(session.app_name, session.user_id, session.id), call_id

    async def on_event_callback(self, *, invocation_context: InvocationContext,
                                event: Event) -> Event | None:
        """Announces the calls of a model's call event before the tools run; the event is kept."""
        if event.partial:
            return None
        calls = [call for call in event.get_function_calls()
                 if call.id and call.name not in CLIENT_FUNCTION_CALL_NAMES]
        if not calls:
            return None
        session = invocation_context.session
        now = self._clock()
        runs = [ToolRun(
            app_name=session.app_name, user_id=session.user_id, session_id=session.id,
            call_id=str(call.id), tool_name=call.name or "", invocation_id=event.invocation_id,
            state=RunState.ANNOUNCED, host=self._host, pid=os.getpid(), attempt=0,
            started_at=now, lease_until=now + self.lease_seconds) for call in calls]
        try:
            await self.ledger.announce(runs)
        except HealError as exc:  # without it, a dead call reads as unknown: never unsafe
            logger.warning("adk_session_heal: %s", exc)
        return None

    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        """Commits the start record before the tool runs; the tool runs only if it did."""
        key = self._key(tool_context)
        if key is None:  # a call without an id cannot be matched to its record later
            return None
        session, call_id = key
        now = self._clock()
        run = ToolRun(
            app_name=session.app_name, user_id=session.user_id, session_id=session.session_id,
            call_id=call_id, tool_name=tool.name, invocation_id=tool_context.invocation_id,
            state=RunState.STARTED, host=self._host, pid=os.getpid(), attempt=0,
            started_at=now, lease_until=now + self.lease_seconds)
        try:
            attempt = await self.ledger.start(run)
        except HealError as exc:
            logger.error("adk_session_heal: %s; tool %s#%s not run", exc, tool.name, call_id)
            return {"error": NOT_RECORDED_ERROR}
        run = replace(run, attempt=attempt)
        runner = asyncio.current_task()  # the task that runs the tool next
        self._running[key] = (run, asyncio.create_task(self._heartbeat(run, key, runner)))
        return None

    async def _heartbeat(self, run: ToolRun, key: tuple[SessionKey, str],
                         runner: asyncio.Task[Any] | None) -> None:
        """Renews the lease while the task running the tool lives.

        A tool cancelled with its invocation (a client gone, a timeout) never
        reaches the after-tool callbacks: the heartbeat stops when that task
        ends, so the lease runs out as if the process had died.
        """
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            if runner is not None and runner.done():
                if self._running.get(key, (None,))[0] is run:
                    del self._running[key]
                return
            try:
                await self.ledger.renew(run, self._clock() + self.lease_seconds)
            except HealError as exc:
                logger.warning("adk_session_heal: %s (tool %s#%s)", exc, run.tool_name,
                               run.call_id)

    async def _end(self, tool_context: ToolContext, state: RunState, result: Any) -> None:
        key = self._key(tool_context)
        entry = self._running.pop(key, None) if key is not None else None
        if entry is None:
            return
        run, heartbeat = entry
        heartbeat.cancel()
        text, truncated = (stored_result(result, self.max_result_bytes)
                           if result is not None else (None, False))
        try:
            await self.ledger.finish(run, state, self._clock(), text, truncated)
        except HealError as exc:
            logger.warning("adk_session_heal: %s (tool %s#%s)", exc, run.tool_name, run.call_id)

    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                  tool_context: ToolContext,
                                  result: dict[str, Any]) -> dict[str, Any] | None:
        """Records ``finished`` with the tool's result; the result goes on unchanged."""
        await self._end(tool_context, RunState.FINISHED, result)
        return None

    async def on_tool_error_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                     tool_context: ToolContext,
                                     error: Exception) -> dict[str, Any] | None:
        """Records ``failed`` with the exception's type (its text may hold secrets)."""
        await self._end(tool_context, RunState.FAILED, {"error_type": type(error).__name__})
        return None

