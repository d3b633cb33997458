"""A real ``Runner.run_live`` driven from a test or a child process, over a scripted live model.

``async with LiveRun(runner, session_id) as live:`` starts the runner's live
run; ``live.say(text)`` sends a user message through its ``LiveRequestQueue``;
``await live.until(condition)`` waits for a condition (a generous timeout, never
a pass/fail time); leaving the block closes the queue, which ends the run, and
waits for it (ADK before 1.27 opens a new connection instead: the run is then
cancelled, as a caller that walks away does). ``live.events`` holds what the
run yielded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from types import TracebackType
from typing import Any

from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.genai import types
from websockets.exceptions import ConnectionClosedOK

USER = "live_user"


def user(text: str) -> types.Content:
    """A user's message."""
    return types.Content(role="user", parts=[types.Part(text=text)])


class LiveRun:
    """One live run of ``runner`` on a session, from its start to its queue's close.

    Args:
        runner: The runner (its agent's model a ``ScriptedLiveModel``).
        session_id: The session (of ``USER``).
        run_config: The run's config (text responses by default).
    """

    def __init__(self, runner: Runner, session_id: str,
                 run_config: RunConfig | None = None) -> None:
        self.runner = runner
        self.session_id = session_id
        self.run_config = run_config or RunConfig(response_modalities=[types.Modality.TEXT])
        self.queue = LiveRequestQueue()
        self.events: list[Event] = []
        self._task: asyncio.Task[None] | None = None

    async def _consume(self) -> None:
        # ADK 1.x raises the connection's close to the caller; 2.x ends the run quietly.
        with contextlib.suppress(ConnectionClosedOK):
            async for event in self.runner.run_live(user_id=USER, session_id=self.session_id,
                                                    live_request_queue=self.queue,
                                                    run_config=self.run_config):
                self.events.append(event)

    async def __aenter__(self) -> LiveRun:
        self._task = asyncio.create_task(self._consume())
        return self

    def say(self, text: str) -> None:
        """Sends a user message to the live run."""
        self.queue.send_content(user(text))

    async def until(self, condition: Callable[[], Any], timeout: float = 120.0) -> None:
        """Waits until ``condition()`` is true; fails the run's error if the run ended first."""
        async with asyncio.timeout(timeout):
            while not condition():
                if self._task is not None and self._task.done():
                    self._task.result()  # raises the run's error, if it had one
                    raise AssertionError("the live run ended before the condition held")
                await asyncio.sleep(0.02)

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        self.queue.close()
        assert self._task is not None
        if error is None:
            await asyncio.wait({self._task}, timeout=30)
            if self._task.done():
                self._task.result()
                return
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task
