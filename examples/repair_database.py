"""One-off repair of a session database that ran without healing.

Run it (offline, no API key)::

    python examples/repair_database.py                      # a temporary SQLite file
    python examples/repair_database.py sqlite+aiosqlite:///sessions.db

1. Builds the database production leaves behind: a turn died mid-tool, then
   the user came back over a *plain* ``DatabaseSessionService``. ADK dropped the
   dead call from the model's request (the model never learnt the tool
   failed) and storage kept the unanswered call.
2. Scans it (read-only), installs the heal ledger, previews the repair
   (dry run), repairs, and repairs again to show that nothing is healed twice.

The same steps from a shell, on any ADK session database::

    adk-session-heal scan URL
    adk-session-heal db upgrade URL
    adk-session-heal repair URL --dry-run
    adk-session-heal repair URL --yes

Exit code 0 when the repair healed the dead call exactly once.
"""

from __future__ import annotations

import asyncio
import sys

from google.adk.sessions import DatabaseSessionService

from adk_session_heal import ScanOptions, SessionFilter, repair, scan
from adk_session_heal.migrate import upgrade
from adk_session_heal.testing import (
    APP_NAME,
    USER_ID,
    describe_event,
    resume_turn,
    spawn_crash,
    temporary_sqlite_database,
)


async def broken_database(db_url: str) -> str:
    """Leaves one session with a dead call, as a deployment without healing would."""
    plain = DatabaseSessionService(db_url)
    try:
        session = await plain.create_session(app_name=APP_NAME, user_id=USER_ID)
        spawn_crash(db_url, session.id)
        result = await resume_turn(plain, session.id, "hello?")
        print("1. a turn crashed mid-tool; the user came back over a plain service:")
        for event in result.session.events:
            print(f"   {event.author:>14}: {describe_event(event)}")
        return session.id
    finally:
        await plain.close()


async def one_off_repair(db_url: str) -> bool:
    """Builds the broken database, repairs it, and returns whether it healed once."""
    session_id = await broken_database(db_url)

    # What to read and how to judge it, as one value: here one app's sessions, calls of the
    # newest turn dead after the default day; scan and repair take the same value.
    options = ScanOptions(where=SessionFilter(app_name=APP_NAME))
    report = await scan(db_url, options)
    print(f"2. scan: {report.sessions_scanned} session(s), {len(report.dead_calls)} dead call(s)")
    for call in report.dead_calls:
        print(f"   {call.status}: {call.tool_name}#{call.call_id} in session {call.session_id}")

    revision = await upgrade(db_url)
    print(f"3. heal ledger installed (revision {revision})")

    preview = await repair(db_url, options, dry_run=True)
    print(f"4. dry run: would write {len(preview.heals)} synthetic event(s)")

    done = await repair(db_url, options)
    print(f"5. repair: wrote {done.healed} synthetic event(s)")
    for heal in done.heals:
        print(f"   {heal.event.id}: {describe_event(heal.event)}")

    again = await repair(db_url, options)
    print(f"6. repair again: wrote {again.healed}, found {len(again.scan.dead_calls)} dead call(s)")
    return (
        len(report.dead_calls) == 1
        and len(preview.heals) == 1
        and done.healed == 1
        and done.heals[0].record.session_id == session_id
        and again.healed == 0
        and not again.scan.dead_calls
    )


def main(argv: list[str]) -> int:
    if argv:
        healed = asyncio.run(one_off_repair(argv[0]))
    else:
        with temporary_sqlite_database() as db_url:
            healed = asyncio.run(one_off_repair(db_url))
    print("repaired" if healed else "NOT repaired")
    return 0 if healed else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
