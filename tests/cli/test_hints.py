"""Every command a CLI message tells the user to run works when pasted as printed.

Each scenario runs the real command in a child process, takes every
```adk-session-heal ...``` span its output names, and runs that: on a
terminal (a pty) answering ``y`` where the command asks. Only the documented
placeholders are filled in (``CALL_ID``, ``JSON``, ``TEXT``), as a user would.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import ROOT
from stores import Store, crashed_histories, fill

HINT = re.compile(r"`(adk-session-heal [^`]+)`")


def run(argv: list[str], *, terminal: bool = False) -> tuple[int, str]:
    """Runs ``adk-session-heal`` with ``argv``; on a terminal it answers ``y`` to its question.

    Returns:
        The exit code and everything it printed (stdout and stderr), wrapped
        lines joined back (rich wraps at the terminal's width).
    """
    command = [sys.executable, "-m", "adk_session_heal", *argv]
    env = {**os.environ, "COLUMNS": "4000"}
    env.pop("ADK_SESSION_HEAL_URL", None)
    if not terminal:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                              check=False, cwd=ROOT, env=env)
        return done.returncode, done.stdout + done.stderr
    leader, follower = pty.openpty()
    child = subprocess.Popen(command, stdin=follower, stdout=follower, stderr=follower,
                             cwd=ROOT, env=env)
    os.close(follower)
    seen, answered = b"", False
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
            if not answered and b"[y/N]" in seen:
                os.write(leader, b"y\n")
                answered = True
            if child.poll() is not None and not ready:
                break
    finally:
        os.close(leader)
        child.wait(timeout=60)
    return child.returncode, seen.decode(errors="replace").replace("\r\n", "\n")


def hints(output: str) -> list[list[str]]:
    """Returns each command a message names, split as a shell would."""
    return [shlex.split(found)[1:] for found in HINT.findall(output)]


def pasted(hint: list[str], **placeholders: str) -> list[str]:
    """Fills in the documented placeholders of a hint, as a user would."""
    return [placeholders.get(word, word) for word in hint]


async def filled_store(tmp_path: Path) -> Store:
    """A SQLite store with dead calls, written through ADK's DatabaseSessionService."""
    store = Store("db_sqlite", f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}")
    await fill(store, crashed_histories())
    return store


@pytest.mark.slow
async def test_scan_repair_and_undo_hints_run_as_printed(tmp_path: Path) -> None:
    """scan's repair hint, the missing ledger's db upgrade hint and repair's undo hint all run."""
    store = await filled_store(tmp_path)
    code, out = run(["scan", store.url, "--older-than", "1h", "--app", "app"])
    assert code == 1, out
    (repair,) = hints(out)
    assert repair == ["repair", store.url, "--app", "app", "--older-than", "1h"]

    code, out = run(repair, terminal=True)  # no ledger yet: it names the command that makes it
    assert code == 2, out
    upgrade, = [h for h in hints(out) if h[0] == "db"]
    assert "--no-ledger" in out
    code, out = run(upgrade, terminal=True)
    assert code == 0, out

    code, out = run(repair, terminal=True)
    assert code == 0, out
    assert "Synthetic events written: 3" in out
    (undo,) = hints(out)
    assert undo[:2] == ["repair", store.url] and undo[2] == "--undo"
    code, out = run(undo, terminal=True)
    assert code == 0, out
    assert "heals taken out: 3" in out


@pytest.mark.slow
async def test_review_hint_resolves_once_the_placeholders_are_filled(tmp_path: Path) -> None:
    """review's hint names the URL: with a listed call id and a JSON value filled in, it runs."""
    store = await filled_store(tmp_path)
    assert run(["db", "upgrade", store.url])[0] == 0
    assert run(["repair", store.url, "--older-than", "1h", "--yes"])[0] == 0
    code, out = run(["review", store.url, "--json"])
    assert code == 0, out
    listed = json.loads(out[:out.rindex("}") + 1])["calls"]
    call_id = next(c["call_id"] for c in listed if c["session_id"] == "dead")
    code, out = run(["review", store.url])
    (resolve,) = hints(out)
    assert store.url in resolve
    assert "add --session ID where a call id is listed in several sessions" in out
    assert [c["session_id"] for c in listed if c["call_id"] == call_id] == ["dead", "stale"]
    code, out = run([*pasted(resolve, CALL_ID=call_id, JSON='{"forecast": "sunny"}'),
                     "--session", "dead"], terminal=True)
    assert code == 0, out
    assert f"Resolved call {call_id}" in out


@pytest.mark.slow
async def test_error_hints_name_commands_that_run(tmp_path: Path) -> None:
    """history with no ledger, an unknown run, an unknown call: each names a command that runs."""
    store = await filled_store(tmp_path)
    code, out = run(["history", store.url])
    assert code == 2, out
    assert "--no-ledger" not in out  # history has no such option
    (upgrade,) = hints(out)
    assert run(upgrade, terminal=True)[0] == 0
    assert run(["history", store.url])[0] == 0

    code, out = run(["repair", store.url, "--undo", "no-such-run", "--yes"])
    assert code == 2, out
    (runs,) = hints(out)
    assert run(runs)[0] == 0

    code, out = run(["review", "resolve", "no-such-call", store.url, "--result", "{}", "--yes"])
    assert code == 2, out
    (listing,) = hints(out)
    assert listing[1:] == [store.url]
    assert run(listing)[0] == 0
