"""A `repair` over 3,000 dead sessions while the application deletes some through ADK.

Shared by the delete-during-repair tests of the SQL layouts and of Redis.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import random
import sys
from pathlib import Path

from google.adk.sessions import BaseSessionService
from stores import APP, USER

from adk_session_heal.ops.scan import scan

DELETE_SESSIONS = 3000
"""Sessions of the delete-during-repair test, each with one dead call."""
DELETES = 150
"""Sessions deleted while `repair` waits for its confirmation, and again while it writes."""


async def _delete(service: BaseSessionService, order: list[str], deleted: list[str],
                  failed: list[str], *, until: asyncio.subprocess.Process | None = None) -> None:
    """Deletes sessions in ``order`` through ADK's own service (until ``until`` exits)."""
    for session_id in order:
        if until is not None and until.returncode is not None:
            return
        try:
            await service.delete_session(app_name=APP, user_id=USER, session_id=session_id)
        except Exception as exc:  # the application's delete must never fail
            failed.append(f"{session_id}: {type(exc).__name__}: {exc}")
        else:
            deleted.append(session_id)


async def _until_in(path: Path, marker: str, child: asyncio.subprocess.Process) -> None:
    """Waits until ``marker`` is in the file ``path`` (or ``child`` exits)."""
    while marker not in path.read_text(errors="replace") and child.returncode is None:
        await asyncio.sleep(0.05)


async def repair_while_deleting(
    url: str, service: BaseSessionService, log: Path, *, others: int = 0
) -> tuple[list[str], set[str]]:
    """Runs `repair` over 3,000 dead sessions (``s0000000``...) while 300 are deleted.

    On a terminal `repair` shows its plan and asks: 150 sessions of its last
    batches are deleted (through ``service``, ADK's own) while it waits, then,
    once confirmed, 150 others at random while it writes (also inside the
    batch being written). Checks what it reports and what is stored.

    Args:
        url: The store, filled with the sessions and ready for a ledger.
        service: The ADK service the application deletes through.
        log: Where `repair`'s stderr goes.
        others: Sessions stored besides the 3,000 (none of them dead).

    Returns:
        The sessions deleted, and those `repair` reported as deleted.
    """
    ids = [f"s{n:07d}" for n in range(DELETE_SESSIONS)]
    before = ids[::-1][:DELETES]
    during = random.Random(28).sample(sorted(set(ids) - set(before)), DELETES)
    leader, follower = pty.openpty()
    try:
        with log.open("wb") as stderr:
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "adk_session_heal", "repair", url,
                "--format", "json", stdin=follower, stdout=asyncio.subprocess.PIPE,
                stderr=stderr)
        os.close(follower)
        output = asyncio.create_task(child.communicate())
        deleted: list[str] = []
        failed: list[str] = []
        await _until_in(log, "[y/N]", child)
        await _delete(service, before, deleted, failed)
        os.write(leader, b"y\n")
        await _delete(service, during, deleted, failed, until=child)
        out, _ = await output
    finally:
        os.close(leader)

    assert failed == []
    errors = log.read_text()
    assert child.returncode == 3, errors[-2000:]  # done, but sessions were skipped
    assert "Error" not in errors
    document = json.loads(out)
    outcomes = {h["session_id"]: h["outcome"] for h in document["heals"]}
    assert set(outcomes) == set(ids)
    gone = {s for s, outcome in outcomes.items() if outcome == "session_deleted"}
    assert set(before) <= gone <= set(deleted)
    assert {s: o for s, o in outcomes.items() if s not in gone} == dict.fromkeys(
        set(ids) - gone, "written")  # deleted during the write: healed, then deleted
    assert (document["skipped"], document["deleted"]) == (len(gone), len(gone))
    assert f"{len(gone)} skipped: their session was deleted since the scan" in errors
    after = await scan(url)
    assert not after.needs_healing
    assert after.sessions_scanned == DELETE_SESSIONS + others - len(deleted)
    return deleted, gone
