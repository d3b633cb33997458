"""A reader whose clock is off: ``python skewed_reader.py OFFSET KIND URL SESSION_ID STOP STALE``.

Before ADK or this package is imported, ``time.time`` is replaced by the real
clock plus OFFSET seconds, so everything in this process (ADK, the wrapper's
clock) reads a host clock that far ahead (or behind, when negative). The
process then reads the session through ``HealingSessionService``
(``HealPolicy(stale_after=STALE, quiet_after=1)``, the default clock skew) in a
loop until the file STOP exists (after its first read it creates STOP.ready),
and prints one JSON line: heals written, reads made, and reads that saw an
unanswered call.
"""

from __future__ import annotations

import sys
import time

_real_time = time.time
_offset = float(sys.argv[1])
time.time = lambda: _real_time() + _offset  # this process's host clock is off by OFFSET

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

from append_services import database_service  # noqa: E402

from adk_session_heal import HealingSessionService, HealPolicy  # noqa: E402
from adk_session_heal.core.findings import CallStatus, classify  # noqa: E402
from adk_session_heal.core.heal_record import HealRecord  # noqa: E402


async def main(kind: str, url: str, session_id: str, stop: str, stale_after: float) -> None:
    heals: list[HealRecord] = []
    inner = database_service(kind, url)
    service = HealingSessionService(inner, HealPolicy(stale_after=stale_after, quiet_after=1),
                                    on_heal=heals.append)
    reads = unanswered = 0
    try:
        while not os.path.exists(stop):
            session = await service.get_session(app_name="app", user_id="user",
                                                session_id=session_id)
            assert session is not None
            reads += 1
            if reads == 1:
                open(stop + ".ready", "w").close()  # the runner may start now
            calls = classify(session.events, now=0.0).calls
            if any(c.status is CallStatus.IN_FLIGHT for c in calls):
                unanswered += 1
            await asyncio.sleep(0.1)
    finally:
        await inner.close()
    print(json.dumps({"heals": len(heals), "reads": reads, "unanswered_reads": unanswered}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6])))
