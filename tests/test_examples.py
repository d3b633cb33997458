"""Every example runs offline with one command and does what its docstring says.

Each example is run as a user would run it: ``python examples/<name>.py`` in a
child process, and checked by its exit code (each example verifies its own
outcome) and the lines it prints. The ``adk web`` agent folder
(``examples/adk_web_agent``) is exercised by ``tests/runtime/test_api_server.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from servers import temporary_database

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
pytestmark = pytest.mark.slow


def run_example(name: str, *args: str, env: dict[str, str] | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs an example; it exits 0, prints no traceback, and leaves no file behind.

    It runs with ``TMPDIR`` set to a fresh directory, which must be empty again
    afterwards, and the listing of its working directory must not change.
    """
    return run_clean([sys.executable, str(EXAMPLES / name), *args], env=env, cwd=cwd)


def run_clean(command: list[str], env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs a command as :func:`run_example` does, with the same checks."""
    workdir = cwd or Path.cwd()
    before = sorted(p.name for p in workdir.iterdir())
    with tempfile.TemporaryDirectory() as tmpdir:
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "TMPDIR": tmpdir, **(env or {})}, cwd=cwd,
        )
        left = sorted(p.name for p in Path(tmpdir).iterdir())
    shown = f"{completed.stdout}\n{completed.stderr}"
    assert completed.returncode == 0, f"{command} failed:\n{shown}"
    assert "Traceback" not in completed.stderr, shown
    assert left == [], f"{command} left files in the temp dir: {left}"
    assert sorted(p.name for p in workdir.iterdir()) == before, f"{command} wrote to {workdir}"
    return completed


def test_crash_and_resume_heals_the_crashed_turn(tmp_path: Path) -> None:
    """The crash-and-resume example heals in storage and the model sees the failure."""
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    completed = run_example("crash_and_resume.py", db_url)
    out = completed.stdout
    assert "died in get_weather (exit code 17)" in out
    assert ('function_response get_weather {"error": "Tool execution was interrupted; it may '
            'have completed.') in out
    assert "'Sorry, fetching the weather failed. Shall I try again?'" in out
    assert out.rstrip().endswith("healed")
    assert "WARNING adk_session_heal adk_session_heal: healed 1 dead tool call(s)" in (
        completed.stderr
    )


def test_crash_and_resume_runs_without_arguments(tmp_path: Path) -> None:
    """With no URL the example uses a temporary SQLite file (one command, nothing to set up)."""
    completed = run_example("crash_and_resume.py", cwd=tmp_path)
    assert completed.stdout.rstrip().endswith("healed")
    assert list(tmp_path.iterdir()) == [], "nothing is written to the working directory"


def test_repair_database_heals_once_and_is_idempotent(tmp_path: Path) -> None:
    """The one-off repair example scans, repairs one dead call, then finds nothing."""
    completed = run_example("repair_database.py", f"sqlite+aiosqlite:///{tmp_path / 's.db'}")
    out = completed.stdout
    assert "2. scan: 1 session(s), 1 dead call(s)" in out
    assert "superseded: get_weather#" in out
    assert "4. dry run: would write 1 synthetic event(s)" in out
    assert "5. repair: wrote 1 synthetic event(s)" in out
    assert "6. repair again: wrote 0, found 0 dead call(s)" in out
    assert out.rstrip().endswith("repaired")


def test_idempotent_payment_charges_once_at_every_crash_point() -> None:
    """Killed at every point and resumed elsewhere: one charge with the key, two without."""
    out = run_example("idempotent_payment.py").stdout
    ours, contrast = out.split("for contrast, with a new key on every run:")
    for point in ("before charge", "after charge", "after tool"):
        assert (f"killed {point} (exit code 17), resumed in another process: 1 charge(s), "
                "call answered: True") in ours
    assert contrast.count("2 charge(s)") == 2  # after the charge, and after the tool returned
    assert out.rstrip().endswith("one charge at every point")


def test_context_filter_plugin_example_contrasts_adk_and_ours() -> None:
    """ADK's filter sends an orphaned tool response; the tool-aware one never does."""
    out = run_example("context_filter_plugin.py").stdout
    assert "ADK ContextFilterPlugin:       rejected after" in out
    assert "answers no call" in out
    assert "ToolAwareContextFilterPlugin:  ok: 6 valid requests" in out


async def test_postgres_example_heals_on_a_real_server() -> None:
    """The PostgreSQL example crashes and resumes on the server named by its env var."""
    async with temporary_database("postgres") as url:
        completed = run_example("postgres_crash_and_resume.py",
                                env={"ADK_SESSION_HEAL_PG_URL": url})
    assert "PostgreSQL: postgresql+asyncpg://postgres@127.0.0.1:5432/heal_test_" in (
        completed.stdout
    )
    assert completed.stdout.rstrip().endswith("healed")


def test_postgres_example_skips_cleanly_without_a_server() -> None:
    """Without a reachable server the PostgreSQL example says it skipped and exits 0."""
    completed = run_example(
        "postgres_crash_and_resume.py",
        env={"ADK_SESSION_HEAL_PG_URL": "postgresql+asyncpg://postgres@127.0.0.1:9/nowhere"},
    )
    assert completed.stdout == ""
    assert completed.stderr.startswith("skipped: no PostgreSQL server reachable for "
                                       "postgresql+asyncpg://postgres@127.0.0.1:9/nowhere")


def test_demo_prints_only_its_own_output() -> None:
    """`adk-session-heal demo` exits 0, leaves no file, and no library log line gets through."""
    completed = run_clean([sys.executable, "-m", "adk_session_heal", "demo"],
                          env={"PYTHONPATH": str(EXAMPLES.parent), "COLUMNS": "100"})
    assert completed.stderr == ""
    assert completed.stdout.rstrip().endswith("healed")
    stray = [line for line in completed.stdout.splitlines()
             if re.match(r"\s*(WARNING|INFO|DEBUG|ERROR)\b", line)]
    assert stray == []


def test_demo_keep_keeps_its_database_and_says_how_to_read_it(tmp_path: Path) -> None:
    """`demo --keep` leaves its SQLite file, prints where, and the scan it names reads it clean."""
    completed = subprocess.run(
        [sys.executable, "-m", "adk_session_heal", "demo", "--keep"], capture_output=True,
        text=True, timeout=120, check=False,
        env={**os.environ, "TMPDIR": str(tmp_path), "COLUMNS": "100"})
    assert completed.returncode == 0, completed.stdout + completed.stderr
    (kept,) = tmp_path.iterdir()
    assert (kept / "sessions.db").is_file()
    said = " ".join(completed.stdout.split())
    assert f"The database is kept: {kept / 'sessions.db'}" in said
    assert "in_flight: nothing stored after the call says its turn is over" in said
    assert "the call is superseded (dead for sure)" in said
    assert '"safe_to_retry": true' in said  # get_weather is declared read_only
    scan = re.search(r"`adk-session-heal (scan [^`]+)`", said)
    assert scan is not None, said
    scanned = subprocess.run([sys.executable, "-m", "adk_session_heal", *scan[1].split()],
                             capture_output=True, text=True, timeout=120, check=False)
    assert scanned.returncode == 0, scanned.stdout + scanned.stderr  # healed: nothing to heal
