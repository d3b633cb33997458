"""A separate process that reads one Redis session through HealingSessionService.

Used by the multi-process test: ``python redis_heal_reader.py URL PREFIX SESSION_ID GO_FILE``
connects, prints ``ready``, waits until GO_FILE exists (so that every process
reads at once), reads the session once through the wrapper over ADK's
``RedisSessionService``, and prints how many heals this process wrote and how
many the session it got back holds.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig

from adk_session_heal.core.heal_record import HealRecord
from adk_session_heal.policy import HealPolicy
from adk_session_heal.runtime.service import HealingSessionService


async def main(url: str, prefix: str, session_id: str, go_file: str) -> None:
    heals: list[HealRecord] = []
    inner = RedisSessionService(RedisSessionServiceConfig(uri=url, key_prefix=prefix))
    client = inner._get_redis()
    await client.ping()
    service = HealingSessionService(inner, HealPolicy(raise_errors=True), on_heal=heals.append)
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not Path(go_file).exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    session = await service.get_session(app_name="app", user_id="user", session_id=session_id)
    assert session is not None
    seen = sum(1 for e in session.events if e.id.endswith("-heal"))
    await client.aclose()
    print(len(heals), seen, flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
