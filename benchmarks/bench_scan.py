"""Benchmark of the streaming scan and the batched repair (not a test).

Measured side by side in one run, per backend (SQLite file and PostgreSQL):

* **naive**: ``list_sessions`` + ``get_session`` + ``classify`` per session
  through ADK's ``DatabaseSessionService`` (what a script without this package
  would do);
* **scan**: :func:`adk_session_heal.repair.scan`;
* **floor**: one raw SELECT of the JSON + ``json.loads`` + classification of
  the dicts (no grouping overhead, no checks); **raw fetch** alone;
* **the CLI's collector setting**: ``adk-session-heal scan URL --format tsv``
  as a whole process, with the CLI's fewer young collections and with
  Python's default thresholds (alternating; wall time and the time spent in
  the garbage collector, measured by ``gc.callbacks``);
* **peak RSS** of a scan process at each size (growth from the smallest to the
  largest size);
* **repair** of N dead sessions: heals/s, ledger on.

Usage::

    python benchmarks/bench_scan.py                      # 100k events, 1M for RSS, both backends
    python benchmarks/bench_scan.py --backends sqlite --sessions 2000 --events 50 \\
        --rss-sizes 100000,1000000 --repair-sessions 10000

The databases are written with exactly the rows ADK writes (see
``tests/support/stores.py``), 5 % of sessions holding a superseded call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from itertools import groupby
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from google.adk.sessions import DatabaseSessionService  # noqa: E402
from servers import temporary_database  # noqa: E402
from stores import APP, USER, Store, bulk_fill, bulk_histories  # noqa: E402

from adk_session_heal import ScanOptions, migrate  # noqa: E402
from adk_session_heal.core.event_access import ADK_EVENTS, STORED_JSON  # noqa: E402
from adk_session_heal.core.findings import classify  # noqa: E402
from adk_session_heal.ops.repair import repair  # noqa: E402
from adk_session_heal.ops.scan import scan  # noqa: E402

NOW = 1_700_100_000.0
ORDER = "ORDER BY app_name, user_id, session_id, timestamp, id"


@asynccontextmanager
async def database(backend: str, directory: Path, name: str) -> AsyncIterator[Store]:
    """A fresh database of the backend."""
    if backend == "sqlite":
        yield Store("db_sqlite", f"sqlite+aiosqlite:///{directory / name}.db")
    else:
        async with temporary_database(backend) as url:
            yield Store(backend, url)


async def filled(store: Store, sessions: int, events: int, dead: float) -> None:
    """Fills the store (distinct histories are reused cyclically to save time)."""
    distinct = bulk_histories(min(sessions, 400), events, dead)
    await bulk_fill(store, [distinct[i % len(distinct)] for i in range(sessions)], chunk=500)


async def naive(store: Store) -> float:
    """list_sessions + get_session + classify over ADK's service; returns seconds."""
    service = DatabaseSessionService(store.url)
    started = time.perf_counter()
    listed = await service.list_sessions(app_name=APP, user_id=USER)
    for s in listed.sessions:
        session = await service.get_session(app_name=APP, user_id=USER, session_id=s.id)
        assert session is not None
        classify(session.events, ADK_EVENTS, now=NOW, stale_after=86400).dead  # noqa: B018
    elapsed = time.perf_counter() - started
    await service.close()
    return elapsed


async def floor(store: Store, *, classify_too: bool) -> float:
    """One raw SELECT (+ json.loads + dict classification); returns seconds."""
    started = time.perf_counter()
    sql = f"SELECT session_id, event_data FROM events {ORDER}"
    if store.kind == "db_sqlite":
        assert store.sqlite_path is not None
        with closing(sqlite3.connect(store.sqlite_path)) as db:
            rows: Any = db.execute(sql)
            if classify_too:
                for _, group in groupby(rows, key=lambda r: r[0]):
                    events = [json.loads(r[1]) for r in group]
                    classify(events, STORED_JSON, now=NOW, stale_after=86400).dead  # noqa: B018
            else:
                for _ in rows:
                    pass
    else:
        import asyncpg

        conn = await asyncpg.connect(store.url.replace("postgresql+asyncpg", "postgresql"))
        await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads,
                                  schema="pg_catalog")
        async with conn.transaction():
            cursor = conn.cursor(sql, prefetch=2000)
            if classify_too:
                current, events = None, []
                async for row in cursor:
                    if row[0] != current:
                        if events:
                            classify(events, STORED_JSON, now=NOW, stale_after=86400).dead  # noqa: B018
                        current, events = row[0], []
                    events.append(row[1])
                classify(events, STORED_JSON, now=NOW, stale_after=86400).dead  # noqa: B018
            else:
                async for _ in cursor:
                    pass
        await conn.close()
    return time.perf_counter() - started


async def timed_scan(store: Store) -> tuple[float, int]:
    """The package's scan, every session classified in Python; returns (seconds, events).

    (The SQL prefilter is measured in ``bench_fleet.py``; here the client-side scan is
    compared with the floor.)
    """
    started = time.perf_counter()
    report = await scan(store.url, ScanOptions(prefilter="never"), now=NOW)
    return time.perf_counter() - started, report.events_scanned


def scan_rss(url: str) -> tuple[float, int]:
    """Runs a scan in a child process; returns (its peak RSS in MB, events).

    The peak is the child's ``VmHWM`` (reset by exec), not ``ru_maxrss``, which
    Linux carries over from the forking parent.
    """
    code = (
        "import asyncio, json, re, sys;"
        "from adk_session_heal.ops.scan import scan;"
        "r = asyncio.run(scan(sys.argv[1]));"
        "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1);"
        "print(json.dumps([int(hwm), r.events_scanned]))"
    )
    out = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True,
                         check=True).stdout
    peak_kb, events = json.loads(out)
    return peak_kb / 1024, events


CLI_PROBE = """
import atexit, gc, os, sys, time
spent, started = [0.0, 0], [0.0]
def timed(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        spent[0] += time.perf_counter() - started[0]
        spent[1] += 1
gc.callbacks.append(timed)
if sys.argv[1] == "default":
    gc.set_threshold = lambda *thresholds: None  # keep Python's thresholds
atexit.register(lambda: os.write(2, f"\\nGC {spent[0]} {spent[1]}\\n".encode()))
from adk_session_heal.cli import main
main(["scan", sys.argv[2], "--format", "tsv"])
"""
"""The CLI's scan, timing the collector; ``default`` keeps Python's thresholds."""


def cli_scan(url: str, collector: str) -> tuple[float, float, int]:
    """Runs the CLI's scan in a child; returns (wall s, s in the collector, collections)."""
    started = time.perf_counter()
    ran = subprocess.run([sys.executable, "-c", CLI_PROBE, collector, url], text=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - started
    last = [line for line in ran.stderr.splitlines() if line.startswith("GC ")][-1]
    _, seconds, count = last.split()
    return wall, float(seconds), int(count)


async def bench_backend(backend: str, args: argparse.Namespace, directory: Path) -> list[str]:
    """Runs every measurement on one backend; returns table lines."""
    lines = []
    async with database(backend, directory, "scan") as store:
        await filled(store, args.sessions, args.events, args.dead)
        # Best of three for the fast measures (the machine may be shared); the
        # naive loop runs once (it is the slow baseline).
        t_naive = await naive(store)
        t_scan, t_floor, t_fetch, events = float("inf"), float("inf"), float("inf"), 0
        for _ in range(3):
            elapsed, events = await timed_scan(store)
            t_scan = min(t_scan, elapsed)
            t_floor = min(t_floor, await floor(store, classify_too=True))
            t_fetch = min(t_fetch, await floor(store, classify_too=False))
        lines += [
            f"| {backend} | naive list+get+classify | {events:,} | {t_naive:.2f} s "
            f"| {events / t_naive:,.0f} ev/s | scan is {t_naive / t_scan:.1f}x faster |",
            f"| {backend} | scan (this package) | {events:,} | {t_scan:.2f} s "
            f"| {events / t_scan:,.0f} ev/s | |",
            f"| {backend} | floor: raw SELECT + json.loads + classify | {events:,} "
            f"| {t_floor:.2f} s | {events / t_floor:,.0f} ev/s "
            f"| scan = {t_scan / t_floor:.2f}x the floor |",
            f"| {backend} | raw fetch alone | {events:,} | {t_fetch:.2f} s "
            f"| {events / t_fetch:,.0f} ev/s | |",
        ]
        runs: dict[str, list[tuple[float, float, int]]] = {"cli": [], "default": []}
        for _ in range(3):  # alternating
            for collector, samples in runs.items():
                samples.append(cli_scan(store.url, collector))
        for collector, label in (("default", "CLI scan, Python's default collector"),
                                 ("cli", "CLI scan, the CLI's fewer young collections")):
            wall, in_gc, count = min(runs[collector])
            lines.append(f"| {backend} | {label} | {events:,} | {wall:.2f} s | "
                         f"{in_gc:.2f} s in {count:,} collections | |")
        ratio = min(runs["cli"])[0] / min(runs["default"])[0]
        lines.append(f"| {backend} | CLI scan wall, fewer collections / default | | | | "
                     f"{ratio:.2f}x |")
    peaks = []
    for size in args.rss_sizes:
        async with database(backend, directory, f"rss{size}") as store:
            await filled(store, size // args.events, args.events, args.dead)
            peak, events = scan_rss(store.url)
            peaks.append((events, peak))
            lines.append(f"| {backend} | scan peak RSS | {events:,} | | {peak:.0f} MB | |")
    if len(peaks) > 1:
        lines.append(f"| {backend} | peak RSS growth {peaks[0][0]:,} -> {peaks[-1][0]:,} events "
                     f"| | | {peaks[-1][1] - peaks[0][1]:+.0f} MB | |")
    async with database(backend, directory, "repair") as store:
        await bulk_fill(store, bulk_histories(args.repair_sessions, 12, 1.0), chunk=500)
        await migrate.upgrade(store.url)
        started = time.perf_counter()
        report = await repair(store.url, now=NOW)
        elapsed = time.perf_counter() - started
        assert report.healed == args.repair_sessions, report.healed
        lines.append(
            f"| {backend} | repair {report.healed:,} dead sessions (scan + write + ledger) "
            f"| {report.scan.events_scanned:,} | {elapsed:.2f} s "
            f"| {report.healed / elapsed:,.0f} heals/s | |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--dead", type=float, default=0.05)
    parser.add_argument("--rss-sizes", default="100000,1000000",
                        type=lambda s: [int(x) for x in s.split(",") if x])
    parser.add_argument("--repair-sessions", type=int, default=10_000)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"{args.sessions:,} sessions x {args.events} events, {args.dead:.0%} dead")
    print("| backend | measure | events | time | rate | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            for line in asyncio.run(bench_backend(backend, args, Path(tmp))):
                print(line, flush=True)


if __name__ == "__main__":
    main()
