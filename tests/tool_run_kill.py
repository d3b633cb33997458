"""A real Runner with the tool-run ledger, to be killed: ``tool_run_kill.py URL SESSION MARKER AT``.

URL is a SQL store's or a ``redis://`` one (``?key_prefix=``: ADK's Redis sessions).

AT is ``before_start`` (a plugin listed before the ledger's touches MARKER in
its ``before_tool_callback``, once the call event is stored and announced,
then sleeps: the tool never starts), ``during_tool`` (the tool touches MARKER,
then sleeps) or ``after_finish`` (a later plugin's ``after_tool_callback`` touches MARKER once
the ledger recorded the finish, before the response event is stored, then
sleeps). The test SIGKILLs the process once MARKER exists.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService
from google.genai import types
from stores import APP, USER, Store

from adk_session_heal.store.redis_tool_runs import RedisToolRunLedger
from adk_session_heal.store.tool_runs import SqlToolRunLedger
from adk_session_heal.store.urls import parse_store_url
from adk_session_heal.testing import ScriptedModel
from adk_session_heal.tool_run_plugin import ToolRunLedgerPlugin


class _Stop(BasePlugin):
    """Touches the marker at its kill point, then hangs until killed.

    ``before_start``: in ``before_tool_callback``, listed before the ledger's
    plugin (the call is announced, its start never recorded); ``after_finish``:
    in ``after_tool_callback``, listed after it (the finish is recorded, the
    response event not yet stored).
    """

    def __init__(self, marker: Path, at: str) -> None:
        super().__init__(f"stop_{at}")
        self.marker, self.at = marker, at

    async def _stop(self, at: str) -> None:
        if self.at == at:
            self.marker.touch()
            await asyncio.sleep(3600)

    async def before_tool_callback(self, **_: Any) -> None:
        await self._stop("before_start")

    async def after_tool_callback(self, **_: Any) -> None:
        await self._stop("after_finish")


async def main(url: str, session_id: str, marker: str, at: str) -> None:
    path = Path(marker)

    async def charge_card(amount: int) -> dict[str, str]:
        """Charges a card."""
        if at == "during_tool":
            path.touch()
            await asyncio.sleep(3600)
        return {"status": "charged"}

    service: BaseSessionService
    ledger: SqlToolRunLedger | RedisToolRunLedger
    if url.startswith("redis"):
        parsed = parse_store_url(url)
        service = RedisSessionService(RedisSessionServiceConfig(
            uri=parsed.redis_url(), key_prefix=parsed.redis_key_prefix))
        ledger = RedisToolRunLedger.from_url(url)
    else:
        service = Store("adk_sqlite" if url.startswith("sqlite:///") else "other", url).service()
        ledger = SqlToolRunLedger.from_url(url)
    recorder, stop = ToolRunLedgerPlugin(ledger, lease_seconds=2.0), _Stop(path, at)
    plugins: list[BasePlugin] = [stop, recorder] if at == "before_start" else [recorder, stop]

    def second_reply(_: Any) -> Any:
        if at == "after_response":
            path.touch()
            time.sleep(3600)
        return ScriptedModel.say("done")

    model = ScriptedModel(script=[ScriptedModel.call("charge_card", {"amount": 5}),
                                  second_reply])
    runner = Runner(app_name=APP, agent=LlmAgent(name="worker", model=model, tools=[charge_card]),
                    session_service=service, plugins=plugins)
    message = types.Content(role="user", parts=[types.Part(text="go")])
    async for _ in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
        pass


async def run_until_killed(url: str, session_id: str, kill_at: str, folder: Path) -> None:
    """Runs this script on the session in a child process and SIGKILLs it at ``kill_at``.

    The tests' one harness for a runner dying at a chosen point: it waits (60 s
    at most) for the child to touch its marker in ``folder``, kills it, and
    reaps it. A child that exits first fails the test with its stderr.
    """
    here = Path(__file__).resolve()
    marker = folder / f"marker-{kill_at}"
    process = subprocess.Popen(
        [sys.executable, str(here), url, session_id, str(marker), kill_at],
        cwd=here.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": f"{here.parent.parent}:{here.parent}"})
    try:
        deadline = time.time() + 60
        while not marker.exists():
            assert process.poll() is None, process.communicate()[1].decode()[-2000:]
            assert time.time() < deadline, "the runner never reached its kill point"
            await asyncio.sleep(0.05)
        process.send_signal(signal.SIGKILL)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)  # reaps it and closes its pipes


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
