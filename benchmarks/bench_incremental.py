"""Benchmark of incremental scans (issue 13): a re-scan against a full scan, in the same run.

Per backend (SQLite file, PostgreSQL, MariaDB) and size (default 100k events;
sessions of 50 realistic events, 5 % ending with a dead call), after
``db upgrade``:

* **full**: ``scan()`` (in-process, the default prefilter) and
  ``adk-session-heal scan URL --format tsv`` (whole process): best of ``--repeat``;
* **first incremental run**: ``scan --incremental`` (reads everything, records
  the watermark and the unsettled sessions: the 5 % with a dead call);
* **unchanged re-scan**: ``scan --incremental`` again: the unsettled sessions
  and those updated within ``--clock-skew`` of the watermark;
* **after a repair**: ``repair --incremental --yes`` heals the dead calls, then
  two re-scans: the first reads the healed sessions once more, the second
  finds nothing unsettled;
* **a write**: one session appended through ADK's service, then a re-scan.

Ratios are against the full scan of the same store in the same run, in-process
against in-process and whole process against whole process.

Usage::

    python benchmarks/bench_incremental.py
    python benchmarks/bench_incremental.py --backends sqlite --sizes 100000,1000000

Not a test: prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_fleet import CLI, NOW, process  # noqa: E402
from bench_scan import database, filled  # noqa: E402
from stores import APP, USER, Store, close  # noqa: E402

from adk_session_heal import ScanOptions, migrate  # noqa: E402
from adk_session_heal.ops.scan import scan  # noqa: E402
from adk_session_heal.testing import History  # noqa: E402


async def in_process(store: Store, repeat: int, *, incremental: bool = False
                     ) -> tuple[float, int]:
    """Best-of-``repeat`` seconds of ``scan()``, and the sessions it read."""
    best, sessions = float("inf"), 0
    for _ in range(repeat):
        started = time.perf_counter()
        report = await scan(store.url, ScanOptions(incremental=incremental), now=NOW)
        best = min(best, time.perf_counter() - started)
        sessions = report.sessions_scanned
    return best, sessions


def whole(argv: list[str], repeat: int) -> float:
    """Best-of-``repeat`` seconds of a whole CLI process."""
    return min(process(argv)[0] for _ in range(repeat))


async def append_one(store: Store) -> None:
    """Appends a user turn and an answered call to one session, through ADK's service."""
    service = store.service()
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id="s0000001")
        assert session is not None
        history = History(start=time.time())
        history.user("one more")
        call = history.call("lookup", {"q": "late"})
        history.respond((call, "lookup", {"answer": 1}))
        for event in history.events:
            event.id = f"late-{event.id}"
            await service.append_event(session, event)
    finally:
        await close(service)


async def bench(backend: str, size: int, args: argparse.Namespace, directory: Path) -> list[str]:
    """Every measure on one backend and size."""
    async with database(backend, directory, f"inc{size}") as store:
        await filled(store, size // args.events, args.events, args.dead)
        await migrate.upgrade(store.url)
        r = args.repeat
        t_full, n_full = await in_process(store, r)
        p_full = whole([*CLI, "scan", store.url, "--format", "tsv"], r)
        p_first = process([*CLI, "scan", store.url, "--format", "tsv", "--incremental"])[0]
        t_again, n_again = await in_process(store, r, incremental=True)
        p_again = whole([*CLI, "scan", store.url, "--format", "tsv", "--incremental"], r)
        process([*CLI, "repair", store.url, "--yes", "--format", "tsv", "--incremental"])
        t_healed, n_healed = await in_process(store, 1, incremental=True)
        t_clean, n_clean = await in_process(store, r, incremental=True)
        p_clean = whole([*CLI, "scan", store.url, "--format", "tsv", "--incremental"], r)
        await append_one(store)
        t_write, n_write = await in_process(store, 1, incremental=True)
        label = f"{backend} {size:,} ev"

        def row(measure: str, seconds: float, base: float, sessions: int | None = None) -> str:
            read = "" if sessions is None else f"; {sessions:,} of {n_full:,} sessions read"
            return f"| {label} | {measure} | {seconds:.3f} s | {seconds / base:.3f}x full{read} |"

        return [
            row("full scan(), in-process", t_full, t_full, n_full),
            row("full CLI scan, whole process", p_full, p_full),
            row("first `scan --incremental`, whole process", p_first, p_full),
            row("unchanged re-scan, in-process (5 % unsettled)", t_again, t_full, n_again),
            row("unchanged re-scan, whole process", p_again, p_full),
            row("re-scan after `repair --incremental`, in-process", t_healed, t_full, n_healed),
            row("next re-scan (all settled), in-process", t_clean, t_full, n_clean),
            row("next re-scan (all settled), whole process", p_clean, p_full),
            row("re-scan after one session written, in-process", t_write, t_full, n_write),
        ]


def main() -> None:
    """Runs the measures and prints the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgres,mariadb")
    parser.add_argument("--sizes", default="100000",
                        type=lambda s: [int(x) for x in s.split(",") if x])
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--dead", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; sessions of {args.events} "
          f"events, {args.dead:.0%} with a dead call")
    print("| store | measure | time | ratio |")
    print("| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            for size in args.sizes:
                for line in asyncio.run(bench(backend, size, args, Path(tmp))):
                    print(line, flush=True)


if __name__ == "__main__":
    main()
