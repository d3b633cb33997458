"""A reader for the race tests: ``python race_reader.py URL SESSIONS GO STOP``.

Reads random sessions (``s000``, ``s001``, ...) through ``HealingSessionService``
over a ``DatabaseSessionService`` in a loop, from the moment the file GO exists
until the file STOP does, and checks each returned session with the core's
``classify``: a session returned holding a dead call the wrapper heals
(superseded) is a race the wrapper lost. It prints ``ready`` once its imports
are done, and last one JSON line: reads, heals written, the sessions returned
with a healable dead call, and the errors the wrapper logged (a failed write
returns the session unhealed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import sys
import time

from google.adk.sessions import DatabaseSessionService

from adk_session_heal.core.findings import classify
from adk_session_heal.core.heal_record import HealRecord
from adk_session_heal.runtime.service import HealingSessionService

APP, USER = "app", "user"


class _Errors(logging.Handler):
    """Keeps what the wrapper logs when it returns a session unhealed: an ERROR (it fails
    open) or the WARNING of a session that changed under every read."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.ERROR and "returning the last read" not in record.msg:
            return  # the WARNING each heal is reported with
        cause = f" ({record.exc_info[1]!r})" if record.exc_info else ""
        self.messages.append((record.getMessage() + cause)[:300])


async def main(url: str, sessions: int, go: str, stop: str) -> None:
    errors = _Errors()
    logging.getLogger("adk_session_heal").addHandler(errors)
    heals: list[HealRecord] = []
    inner = DatabaseSessionService(url)
    service = HealingSessionService(inner, on_heal=heals.append)
    await inner.prepare_tables()
    draw = random.Random(os.getpid())
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.01)
    reads = 0
    lost: list[dict[str, object]] = []
    try:
        while not os.path.exists(stop):
            session_id = f"s{draw.randrange(sessions):03d}"
            session = await service.get_session(app_name=APP, user_id=USER,
                                                session_id=session_id)
            reads += 1
            if session is None:
                lost.append({"session": session_id, "problem": "returned None"})
                continue
            findings = classify(session.events, now=time.time())
            if findings.needs_healing:
                lost.append({"session": session_id, "events": len(session.events),
                             "dead": [call.call_id for call in findings.dead]})
            await asyncio.sleep(0.01)
    finally:
        await inner.close()
    print(json.dumps({"reads": reads, "heals": len(heals), "lost": lost,
                      "errors": errors.messages}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]))
