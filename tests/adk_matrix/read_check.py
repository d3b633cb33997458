"""Reads repaired sessions with ADK alone, then runs ADK's next turn on each.

``python read_check.py URL APP [APP ...]``: for each app's session, through
this ADK's own ``DatabaseSessionService`` (no adk-session-heal code):

1. ``get_session`` loads every row (a pydantic validation error fails here),
   and the heal event sorts right after the crashed call and answers it;
2. one more turn ("hello?") through a real ``Runner``: the model's first
   request holds the crashed call followed by the heal's response;
3. read again: call, heal, the user's message, the reply, in that order.

Prints ``{"apps": {APP: "ok" or the first line of what failed}}`` as its last
stdout line; exits 0 either way (the runner judges each app).
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
    first_line,
    run_turn,
    session_id_for,
)


async def check_app(service: DatabaseSessionService, app_name: str) -> None:
    """Runs the three checks on one app's session.

    Raises:
        CheckFailed: A check did not hold.
    """
    session_id = session_id_for(app_name)
    session = await service.get_session(app_name=app_name, user_id=USER_ID,
                                        session_id=session_id)
    if session is None:
        raise CheckFailed("session not found")
    check_healed_after_call(session)
    first_request = len(REQUESTS)
    await run_turn(build_runner(service, app_name), session_id, "hello?")
    if len(REQUESTS) == first_request:
        raise CheckFailed("the next turn sent the model no request")
    check_request_pairs_crash(REQUESTS[first_request])
    again = await service.get_session(app_name=app_name, user_id=USER_ID,
                                      session_id=session_id)
    assert again is not None
    check_healed_after_call(again, tail=("user", AGENT_NAME))


async def main(url: str, apps: list[str]) -> dict[str, str]:
    """Checks each app's session; returns "ok" or the failure per app."""
    results: dict[str, str] = {}
    service = DatabaseSessionService(url)
    try:
        for app_name in apps:
            try:
                await check_app(service, app_name)
                results[app_name] = "ok"
            except CheckFailed as exc:
                results[app_name] = str(exc)
            except Exception as exc:
                results[app_name] = first_line(exc)
    finally:
        await service.close()
    return results


if __name__ == "__main__":
    emit({"apps": asyncio.run(main(sys.argv[1], sys.argv[2:]))})
