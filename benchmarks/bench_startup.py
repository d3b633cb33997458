"""Benchmark: what switching healing on adds to ``adk web`` startup, and the CLI's own start.

Run: ``.venv/bin/python benchmarks/bench_startup.py``. Not a test: prints tables.

1. Each sample is a fresh interpreter that first imports ADK's web server
   (``google.adk.cli.fast_api``, loaded before ``services.py``), then times, in
   that process, (a) ``import adk_session_heal.register`` and (b) building the
   session service ADK builds at startup, from the plain URI and from its
   ``heal+`` form.
2. Whole processes of the command line (``python -m adk_session_heal --help``
   and ``scan --help``): wall time and peak RSS, beside a bare interpreter and
   one that only imports ``google.adk.sessions`` (what the CLI loaded before
   answering ``--help`` until its imports became lazy).
3. The scan path to its first row (issue 13 point 5: <= 0.5 s and <= 60 MB):
   ``adk-session-heal scan URL --format tsv`` over a small store of each
   layout (``DatabaseSessionService`` on SQLite and on PostgreSQL when its
   server is up, ADK's ``SqliteSessionService`` file). The child wraps the
   streaming reader's ``grouped_sessions`` (a benchmark-side hook, nothing in
   the package) and notes, when the first session's rows arrive, the time
   since the parent started it, its peak RSS so far and which heavy packages
   are loaded. Beside it: a bare interpreter's whole run.

Best of several samples; wall-clock on a shared machine.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

PROBE = """
import sys, time
from pathlib import Path
import google.adk.cli.fast_api
from google.adk.cli.utils.service_factory import create_session_service_from_options
start = time.perf_counter()
if sys.argv[1] == "register":
    import adk_session_heal.register
else:
    if sys.argv[1] == "heal":
        import adk_session_heal.register
    create_session_service_from_options(base_dir=Path(sys.argv[3]),
                                        session_service_uri=sys.argv[2])
print(time.perf_counter() - start)
"""


def sample(kind: str, uri: str, folder: str, runs: int = 5) -> float:
    """The best of ``runs`` fresh interpreters, in seconds."""
    return min(float(subprocess.run([sys.executable, "-c", PROBE, kind, uri, folder],
                                    capture_output=True, text=True, check=True).stdout)
               for _ in range(runs))


PEAK = """
import atexit, os, sys
fd = int(sys.argv[1])
def peak():
    status = open("/proc/self/status").read()
    os.write(fd, status.split("VmHWM:")[1].split()[0].encode())
atexit.register(peak)
kind, target, sys.argv = sys.argv[2], sys.argv[3], [sys.argv[3], *sys.argv[4:]]
if kind == "-m":
    import runpy
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
"""
"""Runs ``-c CODE`` or ``-m MODULE ARGS`` and writes its peak RSS (``VmHWM``, kB) to a pipe.

``ru_maxrss`` will not do: Linux carries the forking parent's peak over into
the child, so every child would look at least as large as this script.
"""


def process(argv: list[str], runs: int = 5) -> tuple[float, float]:
    """The best wall time (s) and peak RSS (MB) of ``runs`` whole processes.

    Args:
        argv: ``["-c", CODE]`` or ``["-m", MODULE, *ARGS]`` for this interpreter.
    """
    best_time, best_rss = float("inf"), float("inf")
    for _ in range(runs):
        read, write = os.pipe()
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", PEAK, str(write), *argv],
                                 pass_fds=(write,), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        os.close(write)
        with os.fdopen(read) as pipe:
            peak_kb = pipe.read()
        assert child.wait() == 0, argv
        elapsed = time.perf_counter() - start
        best_time, best_rss = min(best_time, elapsed), min(best_rss, int(peak_kb) / 1024)
    return best_time, best_rss


def cli_table() -> None:
    """Prints the command line's start: whole processes."""
    print("| process | wall time | peak RSS |")
    print("|---|---:|---:|")
    for label, argv in (
        ("`python -c pass`", ["-c", "pass"]),
        ("`python -c 'import google.adk.sessions'`", ["-c", "import google.adk.sessions"]),
        ("`adk-session-heal --help`", ["-m", "adk_session_heal", "--help"]),
        ("`adk-session-heal scan --help`", ["-m", "adk_session_heal", "scan", "--help"]),
    ):
        wall, rss = process(argv)
        print(f"| {label} | {wall * 1e3:.0f} ms | {rss:.0f} MB |")


FIRST_ROW = """
import os, sys, time
import adk_session_heal.store.streaming as streaming
HEAVY = ("google.adk", "google.genai", "alembic", "rich", "aiohttp", "sqlalchemy", "asyncpg")
grouped = streaming.grouped_sessions
async def first_row(*args, **kwargs):
    noted = False
    async for stored in grouped(*args, **kwargs):
        if not noted:
            noted = True
            status = open("/proc/self/status").read()
            rss = int(status.split("VmHWM:")[1].split()[0]) / 1024
            loaded = sorted({m for m in HEAVY if m in sys.modules})
            os.write(int(sys.argv[1]), f"{time.time()} {rss} {','.join(loaded)}".encode())
        yield stored
streaming.grouped_sessions = first_row
from adk_session_heal.cli import main
main(sys.argv[2:])
"""
"""Runs the CLI; writes the time, peak RSS and heavy packages at the first row to a pipe."""


def to_first_row(url: str, runs: int = 7) -> tuple[float, float, str]:
    """The best time (s) and peak RSS (MB) to the first row of ``scan URL``, and what was loaded.

    The time runs from just before the child is spawned (``time.time()`` on
    both sides) to the first session's rows reaching the classifier.
    """
    best_time, best_rss, loaded = float("inf"), float("inf"), ""
    for _ in range(runs):
        read, write = os.pipe()
        start = time.time()
        child = subprocess.Popen(
            [sys.executable, "-c", FIRST_ROW, str(write), "scan", url, "--format", "tsv"],
            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(write)
        with os.fdopen(read) as pipe:
            noted = pipe.read()
        child.wait()
        at, rss, loaded = (noted.split(" ") + [""])[:3]
        best_time, best_rss = min(best_time, float(at) - start), min(best_rss, float(rss))
    return best_time, best_rss, loaded or "-"


def first_row_line(label: str, url: str) -> str:
    """One table line: the scan of ``url`` to its first row."""
    wall, rss, loaded = to_first_row(url)
    return f"| scan to first row: {label} | {wall * 1e3:.0f} ms | {rss:.0f} MB | {loaded} |"


async def first_row_lines(folder: str) -> list[str]:
    """Builds a 20-session store of each layout and measures each scan to its first row."""
    from servers import server_available, temporary_database
    from stores import Store, bulk_fill, bulk_histories

    histories = bulk_histories(20, 12, 0.2)
    lines = []
    for label, store in (
        ("DatabaseSessionService, SQLite", Store("db_sqlite", f"sqlite+aiosqlite:///{folder}/d.db")),
        ("ADK's SqliteSessionService file", Store("adk_sqlite", f"sqlite:///{folder}/a.db")),
    ):
        await bulk_fill(store, histories)
        lines.append(first_row_line(label, store.url))
    if server_available("postgres"):
        async with temporary_database("postgres") as url:
            await bulk_fill(Store("postgres", url), histories)
            lines.append(first_row_line("DatabaseSessionService, PostgreSQL", url))
    return lines


def first_row_table() -> None:
    """Prints the scan path's start, to the first row read, per layout."""
    bare_wall, bare_rss = process(["-c", "pass"])
    print("| process | wall time | peak RSS | heavy packages loaded |")
    print("|---|---:|---:|---|")
    print(f"| `python -c pass` (whole run) | {bare_wall * 1e3:.0f} ms | {bare_rss:.0f} MB | - |")
    with tempfile.TemporaryDirectory() as folder:
        for line in asyncio.run(first_row_lines(folder)):
            print(line)


def main() -> None:
    """Prints the startup tables."""
    with tempfile.TemporaryDirectory() as folder:
        registering = sample("register", "", folder)
        print(f"import adk_session_heal.register after ADK's server: {registering * 1e3:.1f} ms")
        print()
        print("| session service URI | ADK's service | heal+ service | added |")
        print("|---|---:|---:|---:|")
        for uri in ("memory://", f"sqlite:///{folder}/a.db",
                    f"sqlite+aiosqlite:///{folder}/b.db"):
            plain = sample("plain", uri, folder)
            healing = sample("heal", "heal+" + uri, folder)
            shown = uri.replace(folder, "DIR")
            print(f"| `{shown}` | {plain * 1e3:.1f} ms | {healing * 1e3:.1f} ms "
                  f"| {(healing - plain) * 1e3:+.1f} ms |")
    print()
    cli_table()
    print()
    first_row_table()


if __name__ == "__main__":
    main()
