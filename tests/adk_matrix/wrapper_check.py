"""The wrapper inside one ADK version: heal through a real turn, then a reader that writes nothing.

``python wrapper_check.py turn URL APP``: a ``Runner`` over
``HealingSessionService(DatabaseSessionService(URL))`` takes the user's next
message on the crashed session. The model's first request of that turn must
hold the crashed call followed by the heal's response, and ADK alone must then
read call, heal, message, reply.

``python wrapper_check.py reread URL APP`` (a second process): dumps every ADK
row, reads the session through the wrapper, dumps again; the dumps must be
equal, and the session read must hold the heal once, right after its call.

Exits 1 with ``FAIL: <first line>`` on stderr when a check does not hold.
"""

from __future__ import annotations

import asyncio
import sys

from google.adk.sessions import DatabaseSessionService
from matrix_adk import (
    AGENT_NAME,
    REQUESTS,
    USER_ID,
    CheckFailed,
    build_runner,
    check_healed_after_call,
    check_request_pairs_crash,
    emit,
    fail,
    first_line,
    run_turn,
    session_id_for,
)
from matrix_dump import dump

from adk_session_heal import HealingSessionService


async def turn(url: str, app_name: str) -> None:
    """Heals through the wrapper in a real turn; checks the request and storage."""
    inner = DatabaseSessionService(url)
    service = HealingSessionService(inner)
    session_id = session_id_for(app_name)
    try:
        await run_turn(build_runner(service, app_name), session_id, "hello?")
        if not REQUESTS:
            raise CheckFailed("the turn sent the model no request")
        check_request_pairs_crash(REQUESTS[0])
        stored = await inner.get_session(app_name=app_name, user_id=USER_ID,
                                         session_id=session_id)
        assert stored is not None
        check_healed_after_call(stored, tail=("user", AGENT_NAME))
    finally:
        await service.close()


async def reread(url: str, app_name: str) -> None:
    """Reads through the wrapper in a fresh process; checks nothing was written."""
    before = await dump(url)
    service = HealingSessionService(DatabaseSessionService(url))
    try:
        session = await service.get_session(app_name=app_name, user_id=USER_ID,
                                            session_id=session_id_for(app_name))
    finally:
        await service.close()
    if session is None:
        raise CheckFailed("session not found")
    check_healed_after_call(session, tail=("user", AGENT_NAME))
    after = await dump(url)
    if after != before:
        added = [r for r in after["rows"] if r not in before["rows"]]
        raise CheckFailed(f"the second reader changed storage: {len(added)} rows added "
                          f"or changed, first {added[:1]!r:.200}")


def main() -> None:
    """Runs the mode named by ``argv[1]``."""
    mode, url, app_name = sys.argv[1:4]
    try:
        asyncio.run(turn(url, app_name) if mode == "turn" else reread(url, app_name))
    except CheckFailed as exc:
        fail(str(exc))
    except Exception as exc:
        fail(first_line(exc))
    emit({"ok": True})


if __name__ == "__main__":
    main()
