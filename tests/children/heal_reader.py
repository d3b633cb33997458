"""A separate process that reads one session through HealingSessionService.

Used by the multi-process tests: ``python heal_reader.py URL SESSION_ID START_AT``
waits until the wall clock reaches START_AT (so several processes race), reads
the session once, and prints how many heals this process wrote.
"""

from __future__ import annotations

import asyncio
import sys
import time

from google.adk.sessions import DatabaseSessionService

from adk_session_heal.core.heal_record import HealRecord
from adk_session_heal.runtime.service import HealingSessionService


async def main(url: str, session_id: str, start_at: float) -> None:
    heals: list[HealRecord] = []
    inner = DatabaseSessionService(url)
    service = HealingSessionService(inner, on_heal=heals.append)
    await inner.prepare_tables()
    time.sleep(max(0.0, start_at - time.time()))
    session = await service.get_session(app_name="app", user_id="user", session_id=session_id)
    assert session is not None
    await inner.close()
    print(len(heals))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
