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
  runs, a heartbeat pushes the lease forward every third of ``lease_seconds``
  (from a thread of its own: below);
* when the tool returns, ``finished`` with its result (secrets redacted, at
  most ``max_result_bytes`` kept: :func:`~adk_session_heal.core.tool_runs.stored_result`);
  when it raises, ``failed`` with the exception's type only.

If the start cannot be recorded, the tool does not run: the model gets an
error saying so, which is true (a tool run the ledger did not see would later
read as ``not_started`` and be called safe to retry). A failed heartbeat or
end record is logged; the tool's result reaches the model as usual.

What the records mean for a dead call is :func:`~adk_session_heal.core.tool_runs.run_outcome`.

**Runs of a call that ran before.** ADK runs a call again when a resumable app
resumes an interrupted invocation (it replays the unanswered calls, matched by
the stored call event), ``RerunSafeCallsPlugin`` runs dead read-only calls
again, and a model may send a call again under its id (a live model after a
reconnect). A call whose record this plugin's announcement did not create in
this process is such a run (or one announced elsewhere, or an id the ledger
knew when the model sent it again): before it starts, the plugin reads the
call's record, once, and does what :func:`~adk_session_heal.core.tool_runs.replay_action`
says: a call that finished is answered with its recorded result and the tool
does not run; one that started and whose lease expired (or failed) is answered
"may have run", as a heal would be, unless its tool is declared ``read_only``
or ``idempotent`` (``policy``); one that was only announced runs; one whose
lease is alive (another process runs it now) is waited for, up to
``replay_wait`` seconds, then answered with the finished result or refused.
Before a call is answered "may have run", the tool's reconcile hook
(``policy.reconcile``) is asked, if it has one: a result it finds is the
answer, and "did not happen" lets the call run.
A call whose record this process's announcement created is a first run and
costs no read (the ledger's ``announce`` returns the ids it recorded).

Every kind of tool ADK runs is recorded, keyed (:func:`idempotency_key`) and
guarded the same way, by its call id:

* a plain ``def``, on the loop or in ADK's thread pool, and ``async`` tools;
* generator tools, plain or async: ADK 2.x's ``run_async`` runs one as a
  workflow node between the tool callbacks, storing what it yields before the
  call's answer; the function gets the node's context, whose call
  :func:`idempotency_key` finds through its parents;
* an ``AgentTool``, and a ``mode="single_turn"`` sub-agent (which ADK 2.x
  offers the model as a tool): the call is guarded by its id in the caller's
  session; its agent's own tool calls are new calls, recorded with leases of
  their own (in the ``AgentTool``'s new in-memory session, or in the caller's
  session for a single-turn agent), and ADK replays the outer call, not them;
* MCP tools (``McpToolset``): the call is guarded in the client, whatever the
  server does;
* a ``LongRunningFunctionTool``, recorded while its function runs; ADK's
  resume does not run an unanswered long-running call again (it pauses until
  the call's answer comes), so the guard never sees one: the call stays
  pending, whatever its record says;
* live-mode (``run_live``) streaming tools, async generator functions: ADK
  (every supported release) answers the call "pending" between its callbacks and
  streams the generator in a task of its own
  (:mod:`~adk_session_heal.runtime.live_streams`). The start is recorded before
  the stream starts, and the after-tool callback hands the lease to the stream's
  task: renewed while it streams, however long, the record ``started``, never
  ``finished`` with "pending". No callback sees a stream end (ADK consumes the
  generator in that task, and handles its errors there), so no end is recorded:
  when the stream ends (done, failed, stopped by ``stop_streaming`` or the live
  run's end), renewals stop, the lease runs out, and the call reads "may have
  run". ADK does not guard a live call the model sends again under its id (after
  ADK resumed the connection, or in another live run of the session): it starts
  a second stream; the plugin guards it as a replay (waited for, then refused,
  while the stream holds its lease). ADK 2.13 registers the stream's task by
  call id; 1.x up to 2.7 by tool name, which the plugin reads right after ADK
  registered it (only if an earlier plugin's after-tool callback awaits while a
  parallel call of the same tool starts its stream does the lease go to that
  other stream). On 2.13, a stream that ended before the plugin's after-tool
  callback ran (an earlier plugin's callback awaited that long) is recorded
  ``finished`` with "pending", as before. ADK 1.22 to 1.26 run no plugin tool
  callback in live mode
  (:data:`~adk_session_heal.core.adk_compat.LIVE_TOOL_PLUGIN_CALLBACKS`): there
  the plugin announces no live call (an announcement alone would read "did not
  start" for a tool that ran), so a live call has no record (``unknown``), and a
  call sent again runs again, as without the plugin.

A plain ``def`` generator tool is not streamed in live mode (nor run as a node
by ADK 1.x): ADK answers the call with the generator itself, unstarted, and
the session store runs its body when it serializes that answer, after the
callbacks. The plugin records no finish for a generator object: its lease runs
out, and the call reads "may have run".

The heartbeat does not run on the runner's event loop, which a tool may block:
ADK calls a plain ``def`` tool (or generator) on the loop itself unless
``RunConfig.tool_thread_pool_config`` sends it to a thread pool (ADK 2.x;
on 1.x only in live mode), and a tool that computes holds the loop as long.
Leases are renewed by one daemon thread per plugin, with an event loop of its
own and its own connections to the ledger (:meth:`ToolRunLedger.open_copy`: a
new engine over the same connection settings, or a new Redis client). It
starts with the first tool and ends after a minute without one, or on
:meth:`ToolRunLedgerPlugin.close` once no tool runs (closing never drops a
running tool's lease: ADK 1.x's ``AgentTool`` closes its parent's plugins).
Every kind in the list above keeps its lease the same way, however long it runs:
the lease is held for the task that runs the tool's callbacks, from the start
record to the end record (a live stream's, from its start record on, for the
task ADK streams it in). The only thing that stops a lease is the run ending:

* the tool returned or raised (the after-tool or error callback records it);
* the task that ran the tool ended without either (cancelled with its
  invocation): renewals stop, and the lease runs out as if the process had
  died (a plain ``def`` still running in a pool thread after its call was
  cancelled is no longer covered: it may have run);
* the process died: nothing renews it; the lease runs out ``lease_seconds``
  after the last renewal at most, and the call can then be healed;
* for a live stream, whose lease its own task holds: that task ending.

A tool that holds the GIL without a break (C code that never releases it)
for longer than the lease would starve the heartbeat thread too.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from ..core import adk_compat
from ..core.findings import CLIENT_FUNCTION_CALL_NAMES
from ..core.reconcile import settled_outcome
from ..core.session_key import SessionKey
from ..core.tool_runs import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_RESULT_BYTES,
    ReplayAction,
    RunState,
    ToolRun,
    as_response,
    replay_action,
    stored_result,
)
from ..errors import HealError
from ..policy import CallOutcome, DeadCall, DoubtfulCall, HealPolicy
from ..store.reconcile_hooks import HookReconciler
from .idempotency import idempotency_key
from .live_streams import is_live_stream, stream_task
from .tool_leases import LeaseKeeper, ToolRunLedger

logger = logging.getLogger("adk_session_heal")

NOT_RECORDED_ERROR = (
    "The tool was not run: its start could not be recorded in the tool-run ledger. "
    "It is safe to retry later."
)
"""The result the model gets when a start cannot be recorded (the tool did not run)."""

STILL_RUNNING_ERROR = (
    "The tool was not run: another run of this call still holds its lease (it is running "
    "elsewhere). It may complete; check the system before retrying."
)
"""The result of a run of a call whose earlier run still held its lease after ``replay_wait``."""

REPLAY_REASON = "replayed"
"""The ``reason`` a payload function sees for a call answered instead of run again."""

_ANNOUNCED_KEPT = 10_000
"""How many calls announced in this process are remembered as first runs."""


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
        policy: The tools' effects, the clock skew between hosts, and the
            answer of a call that is not run again (the payload a heal would
            write), for runs of calls that ran before (the module docstring).
        replay_wait: How long such a run waits for an earlier run that still
            holds its lease (default: twice ``lease_seconds``).
    """

    def __init__(self, ledger: ToolRunLedger, *, lease_seconds: float = DEFAULT_LEASE_SECONDS,
                 max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
                 name: str = "adk_session_heal_tool_runs",
                 clock: Callable[[], float] = time.time,
                 policy: HealPolicy | None = None,
                 replay_wait: float | None = None) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        super().__init__(name)
        self.ledger = ledger
        self.lease_seconds = float(lease_seconds)
        self.max_result_bytes = max_result_bytes
        self.policy = policy or HealPolicy()
        self.replay_wait = 2 * self.lease_seconds if replay_wait is None else float(replay_wait)
        self._announced: OrderedDict[tuple[SessionKey, str], None] = OrderedDict()
        self._live_unseen_said = False
        self._clock = clock
        self._host = socket.gethostname()
        if not callable(getattr(ledger, "open_copy", None)):
            raise TypeError("the ledger must have open_copy(): the lease heartbeat renews "
                            "from a thread of its own, over connections of its own")
        self._leases = LeaseKeeper(ledger, self.lease_seconds, clock)

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
        if (invocation_context.live_request_queue is not None
                and not adk_compat.LIVE_TOOL_PLUGIN_CALLBACKS):
            # No plugin tool callback runs in this ADK's live mode: an announcement would stay
            # the only record and read "did not start" for a tool that ran. None: unknown.
            if not self._live_unseen_said:
                self._live_unseen_said = True
                logger.warning("adk_session_heal: ADK %s runs no plugin tool callback in live "
                               "mode (1.27 does): live tool calls are not recorded",
                               ".".join(map(str, adk_compat.ADK_VERSION)))
            return None
        session = invocation_context.session
        now = self._clock()
        runs = [ToolRun(
            app_name=session.app_name, user_id=session.user_id, session_id=session.id,
            call_id=str(call.id), tool_name=call.name or "", invocation_id=event.invocation_id,
            state=RunState.ANNOUNCED, host=self._host, pid=os.getpid(), attempt=0,
            started_at=now, lease_until=now + self.lease_seconds) for call in calls]
        try:
            recorded = await self.ledger.announce(runs)
        except HealError as exc:  # without it, a dead call reads as unknown: never unsafe
            logger.warning("adk_session_heal: %s", exc)
            return None
        key = SessionKey(session.app_name, session.user_id, session.id)
        # Only a call this announcement recorded is a first run: an id the ledger knew (the
        # model sent the call again, say after a live reconnect) is a run of a call that may
        # have run before, guarded like ADK's replay.
        for call_id in (run.call_id for run in runs) if recorded is None else recorded:
            self._announced[(key, call_id)] = None
        while len(self._announced) > _ANNOUNCED_KEPT:
            self._announced.popitem(last=False)
        return None

    async def _earlier_run(self, tool: BaseTool, key: tuple[SessionKey, str],
                           tool_context: ToolContext) -> dict[str, Any] | None:
        """Reads the record of a call that may have run before; ``None``: run the tool.

        Else the answer the model gets instead of a run (see the module docstring).
        """
        session, call_id = key
        effect = self.policy.effect_of(tool.name)
        deadline = self._clock() + self.replay_wait
        while True:
            try:
                run = (await self.ledger.runs(session, [call_id])).get(call_id)
            except HealError as exc:
                logger.error("adk_session_heal: %s; tool %s#%s not run", exc, tool.name, call_id)
                return {"error": NOT_RECORDED_ERROR}
            now = self._clock()
            skew = 0.0 if run is None or run.host == self._host else (
                self.policy.clock_skew_seconds)
            action, outcome = replay_action(run, effect, now, skew)
            if action is ReplayAction.RUN:
                return None
            if action is ReplayAction.ANSWER:
                assert run is not None and outcome is not None
                recovered = run.result if run.state is RunState.FINISHED else None
                if outcome is CallOutcome.MAY_HAVE_RUN and tool.name in self.policy.reconcile:
                    doubt = DoubtfulCall(session.app_name, session.user_id,
                                         session.session_id, call_id, tool.name,
                                         idempotency_key(tool_context))
                    answers = await HookReconciler(self.policy).settle([doubt])
                    settled = settled_outcome(outcome, answers[doubt.idempotency_key])
                    if settled is not None:
                        outcome, recovered = settled
                if outcome is CallOutcome.NOT_STARTED:  # the real system says it never ran
                    return None
                logger.warning("adk_session_heal: tool %s#%s ran before (%s); not run again",
                               tool.name, call_id, outcome.value)
                return self.policy.payload_for(DeadCall(call_id, tool.name, REPLAY_REASON,
                                                        outcome=outcome, recovered=recovered))
            if now >= deadline:
                logger.error("adk_session_heal: tool %s#%s is still running elsewhere (%s/%s);"
                             " not run again", tool.name, call_id, run and run.host,
                             run and run.pid)
                return {"error": STILL_RUNNING_ERROR}
            await asyncio.sleep(min(1.0, self.lease_seconds / 10, deadline - now))

    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        """Commits the start record before the tool runs; the tool runs only if it did."""
        key = self._key(tool_context)
        if key is None:  # a call without an id cannot be matched to its record later
            return None
        announced_here = key in self._announced
        self._announced.pop(key, None)
        if not announced_here:  # a run of a call that may have run before (a replay)
            answer = await self._earlier_run(tool, key, tool_context)
            if answer is not None:
                return answer
        session, call_id = key
        now = self._clock()
        run = ToolRun(
            app_name=session.app_name, user_id=session.user_id, session_id=session.session_id,
            call_id=call_id, tool_name=tool.name, invocation_id=tool_context.invocation_id,
            state=RunState.STARTED, host=self._host, pid=os.getpid(), attempt=0,
            started_at=now, lease_until=now + self.lease_seconds)
        try:
            self._leases.reserve()  # the heartbeat's thread runs before the tool can
        except HealError as exc:
            logger.error("adk_session_heal: %s; tool %s#%s not run", exc, tool.name, call_id)
            return {"error": NOT_RECORDED_ERROR}
        try:
            attempt = await self.ledger.start(run)
        except BaseException as exc:
            self._leases.unreserve()
            if not isinstance(exc, HealError):
                raise
            logger.error("adk_session_heal: %s; tool %s#%s not run", exc, tool.name, call_id)
            return {"error": NOT_RECORDED_ERROR}
        # Renewed from the heartbeat's thread while the task running the tool (this one) lives.
        self._leases.hold(key, replace(run, attempt=attempt), asyncio.current_task())
        return None

    async def _end(self, tool_context: ToolContext, state: RunState, result: Any) -> None:
        key = self._key(tool_context)
        run = self._leases.release(key, asyncio.current_task()) if key is not None else None
        if run is None:
            return
        text, truncated = (stored_result(result, self.max_result_bytes)
                           if result is not None else (None, False))
        try:
            await self.ledger.finish(run, state, self._clock(), text, truncated)
        except HealError as exc:
            logger.warning("adk_session_heal: %s (tool %s#%s)", exc, run.tool_name, run.call_id)

    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                  tool_context: ToolContext,
                                  result: dict[str, Any]) -> dict[str, Any] | None:
        """Records ``finished`` with the tool's result; the result goes on unchanged.

        ADK 1.x passes a result that is not a dict as the tool returned it (an
        ``AgentTool``'s text, say) and sends it to the model as ``{"result": ...}``:
        that is what is recorded, so a heal can answer with it.

        Two results are not an end. A live stream's "pending": the lease goes
        to the task ADK streams in (:mod:`~adk_session_heal.runtime.live_streams`),
        renewed while it runs. A generator object (how ADK 1.x, and live mode,
        return a plain generator tool's generator, unstarted: the session store
        runs its body when it serializes the answer): the lease is let go. Either
        way nothing sees the work end, so nothing is recorded: the lease runs
        out and the call reads "may have run".
        """
        key = self._key(tool_context)
        if key is not None:
            running = asyncio.current_task()
            stream = stream_task(tool, tool_context) if is_live_stream(tool, tool_context) else None
            if stream is not None and self._leases.hand_over(key, running, stream):
                return None
            if inspect.isgenerator(result) or inspect.isasyncgen(result):
                self._leases.release(key, running)
                return None
        await self._end(tool_context, RunState.FINISHED, as_response(result))
        return None

    async def on_tool_error_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                     tool_context: ToolContext,
                                     error: Exception) -> dict[str, Any] | None:
        """Records ``failed`` with the exception's type (its text may hold secrets)."""
        await self._end(tool_context, RunState.FAILED, {"error_type": type(error).__name__})
        return None


    async def close(self) -> None:
        """Ends the heartbeat's thread (ADK's ``Runner.close`` calls this).

        At once if no tool runs; else once the tools running have ended (their
        leases are renewed until then). A tool started later starts the thread
        again. The ledger itself is the caller's to close.
        """
        thread = self._leases.close()
        if thread is not None:
            await asyncio.to_thread(thread.join)
