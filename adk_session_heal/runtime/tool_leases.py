"""The tool-run ledger's protocol, and the heartbeat that renews running tools' leases.

:class:`LeaseKeeper` renews the lease of every tool :class:`~adk_session_heal.
runtime.tool_run_plugin.ToolRunLedgerPlugin` runs, from a daemon thread with an
event loop and ledger connections of its own (the runner's loop may be blocked
by the tool itself), for as long as the task that holds the lease lives.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.session_key import SessionKey
from ..core.tool_runs import RunState, ToolRun
from ..errors import HealError

logger = logging.getLogger("adk_session_heal")


class ToolRunLedger(Protocol):
    """Where tool runs are recorded: ``SqlToolRunLedger`` or ``RedisToolRunLedger``."""

    async def runs(self, key: SessionKey, call_ids: Iterable[str] | None = None
                   ) -> dict[str, ToolRun]:
        """Returns the session's tool runs by call id (only ``call_ids`` when given)."""
        ...

    async def announce(self, runs: Sequence[ToolRun]) -> Collection[str] | None:
        """Records calls about to run, keeping existing records.

        Returns:
            The call ids it recorded (an id already recorded is left as it was,
            and out); ``None`` if the ledger cannot tell, when every call is
            taken as new (a first run, which starts without reading its record).
        """

    async def start(self, run: ToolRun) -> int:
        """Records a start; returns its attempt number."""

    async def renew(self, run: ToolRun, lease_until: float) -> bool:
        """Pushes a running attempt's lease forward."""

    async def finish(self, run: ToolRun, state: RunState, finished_at: float,
                     result: str | None, truncated: bool) -> bool:
        """Records how an attempt ended."""

    def open_copy(self) -> ToolRunLedger:
        """Returns the same ledger over connections of its own, for another thread's loop.

        The heartbeat renews leases from a thread with its own event loop: an
        async engine's or client's connections belong to the loop that opened
        them. Builds objects only (nothing connects until first used).
        """

    async def close(self) -> None:
        """Releases what the ledger opened."""


_IDLE_SECONDS = 60.0
"""How long the heartbeat thread waits for a tool to start before it ends."""


@dataclass(slots=True)
class _Held:
    """A running tool's lease: its attempt, the task running it, when to renew it next."""

    run: ToolRun
    task: asyncio.Task[Any] | None
    renew_at: float


class LeaseKeeper:
    """Renews running tools' leases from a daemon thread with its own loop and connections.

    The runner's event loop only adds and removes entries (under a lock); the
    thread wakes every third of the lease, renews what is due on its own copy
    of the ledger, and ends after :data:`_IDLE_SECONDS` with nothing to hold.
    A forked child starts with no thread and no entries (see :func:`_after_fork`).

    Args:
        ledger: The plugin's ledger (copied for the thread: :meth:`ToolRunLedger.open_copy`).
        lease_seconds: The lease; renewed every third of it.
        clock: Seconds since the epoch, for ``lease_until``.
    """

    def __init__(self, ledger: ToolRunLedger, lease_seconds: float,
                 clock: Callable[[], float]) -> None:
        self._ledger = ledger
        self._lease = lease_seconds
        self._period = lease_seconds / 3
        self._clock = clock
        self._cond = threading.Condition()
        self._held: dict[tuple[SessionKey, str, asyncio.Task[Any] | None], _Held] = {}
        self._reserved = 0
        self._active_at = 0.0
        self._closing = False
        self._thread: threading.Thread | None = None
        _KEEPERS.add(self)

    def _forked(self) -> None:
        """In a forked child: no thread runs, no tool of the parent's runs, the lock is free."""
        self._cond = threading.Condition()
        self._held.clear()
        self._reserved = 0
        self._closing = False
        self._thread = None

    def _start(self) -> None:
        """Starts the thread unless it runs (called with the lock held)."""
        if self._thread is None:
            copy = self._ledger.open_copy()
            self._thread = threading.Thread(target=self._serve, args=(copy,), daemon=True,
                                            name="adk_session_heal_tool_leases")
            self._thread.start()
        self._closing = False
        self._active_at = time.monotonic()

    def reserve(self) -> None:
        """Makes sure the thread runs before a start is recorded; then :meth:`hold` or
        :meth:`unreserve`.

        Raises:
            HealError: The ledger cannot be copied for the thread.
        """
        with self._cond:
            self._start()
            self._reserved += 1

    def unreserve(self) -> None:
        """Takes back a :meth:`reserve` whose start was not recorded."""
        with self._cond:
            self._reserved = max(0, self._reserved - 1)
            self._active_at = time.monotonic()

    def hold(self, key: tuple[SessionKey, str], run: ToolRun,
             task: asyncio.Task[Any] | None) -> None:
        """Renews ``run``'s lease from now on, while ``task`` (the one running the tool) lives."""
        with self._cond:
            self._reserved = max(0, self._reserved - 1)
            self._start()  # closed since reserve: runs again
            self._held[(*key, task)] = _Held(run, task, time.monotonic() + self._period)

    def release(self, key: tuple[SessionKey, str],
                task: asyncio.Task[Any] | None) -> ToolRun | None:
        """Stops renewing the run ``task`` holds for ``key``; returns it (``None``: none held).

        Keyed by the task too: two runs of one call id at once (a repeated
        call) each end their own attempt, and a run the plugin answered
        without starting it (a replay refused while an earlier run holds the
        lease, whose after-tool callbacks ADK still runs) ends none.
        """
        with self._cond:
            held = self._held.pop((*key, task), None)
            self._active_at = time.monotonic()
        return None if held is None else held.run

    def hand_over(self, key: tuple[SessionKey, str], task: asyncio.Task[Any] | None,
                  to: asyncio.Task[Any]) -> bool:
        """Moves the run ``task`` holds for ``key`` to ``to``: renewed while ``to`` lives.

        For a live stream, which ADK runs in a task of its own after the call's
        callbacks. A ``to`` already done takes nothing: the run is dropped, its
        lease left to run out.

        Returns:
            Whether ``task`` held a run for ``key`` (else nothing changed).
        """
        with self._cond:
            held = self._held.pop((*key, task), None)
            if held is None:
                return False
            if not to.done():
                held.task = to
                self._held[(*key, to)] = held
            self._active_at = time.monotonic()
        return True

    def held(self) -> list[ToolRun]:
        """The runs whose leases are being renewed."""
        with self._cond:
            return [held.run for held in self._held.values()]

    def close(self) -> threading.Thread | None:
        """Ends the thread as soon as no lease is held (it closes its ledger copy).

        Leases held go on being renewed until their tools end: closing a runner
        must not get a tool that still runs healed (ADK 1.x's ``AgentTool``
        closes its parent's plugins when its own agent is done).

        Returns:
            The thread, to join, if it ends now (nothing held); else ``None``.
        """
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            if self._held or self._reserved:
                return None
            thread, self._thread = self._thread, None
        return thread

    def _due(self) -> list[ToolRun] | None:
        """Waits until a lease is due; returns the runs to renew, or ``None`` to end.

        Called by the thread, with the lock held. A run whose task ended (or
        whose loop was closed) is dropped here, unrenewed.
        """
        me = threading.current_thread()
        while self._thread is me:
            now = time.monotonic()
            for key, held in list(self._held.items()):
                task = held.task
                if task is not None and (task.done() or task.get_loop().is_closed()):
                    del self._held[key]
            due = [held for held in self._held.values() if held.renew_at <= now]
            if due:
                for held in due:
                    held.renew_at = now + self._period
                return [held.run for held in due]
            if self._held:
                wait = min(held.renew_at for held in self._held.values()) - now
            elif self._reserved or (not self._closing
                                    and now < self._active_at + _IDLE_SECONDS):
                # A run held from now on is due a period from now: it needs no wake-up.
                wait = self._period
            else:
                self._thread = None
                return None
            self._cond.wait(wait)
        return None

    def _serve(self, ledger: ToolRunLedger) -> None:
        """The thread: renews due leases on its own loop until told to end, then closes."""
        loop = asyncio.new_event_loop()
        try:
            while True:
                with self._cond:
                    due = self._due()
                if due is None:
                    return
                try:
                    loop.run_until_complete(self._renew(ledger, due))
                except Exception:  # never end the thread: every lease would run out
                    logger.exception("adk_session_heal: could not renew tool leases")
        finally:
            try:
                loop.run_until_complete(ledger.close())
            except Exception:  # the thread ends either way; say why its connections leaked
                logger.exception("adk_session_heal: could not close the lease heartbeat's ledger")
            loop.close()

    async def _renew(self, ledger: ToolRunLedger, due: list[ToolRun]) -> None:
        """Renews each due lease (at once); a failure is logged and retried at the next beat."""
        until = self._clock() + self._lease
        outcomes = await asyncio.gather(*(ledger.renew(run, until) for run in due),
                                        return_exceptions=True)
        for run, outcome in zip(due, outcomes, strict=True):
            if isinstance(outcome, HealError):
                logger.warning("adk_session_heal: %s (tool %s#%s)", outcome, run.tool_name,
                               run.call_id)
            elif isinstance(outcome, BaseException):
                logger.error("adk_session_heal: could not renew the lease of tool %s#%s",
                             run.tool_name, run.call_id, exc_info=outcome)


_KEEPERS: weakref.WeakSet[LeaseKeeper] = weakref.WeakSet()


def _after_fork() -> None:
    """Resets every lease keeper in a forked child (its parent's thread does not exist there)."""
    for keeper in list(_KEEPERS):
        keeper._forked()


if hasattr(os, "register_at_fork"):  # not on Windows, which cannot fork
    os.register_at_fork(after_in_child=_after_fork)
