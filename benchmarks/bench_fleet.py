"""Benchmark of scans and repairs at fleet scale (issue 13), each a ratio measured in the same run.

Per backend (SQLite file, PostgreSQL, MariaDB) and size (default 100k and 1M
events; sessions of 50 realistic events, 5 % ending with a dead call):

* **in-process** (the Python API, one interpreter): the naive loop
  (``list_sessions`` + ``get_session`` + ``classify`` through ADK's
  ``DatabaseSessionService``) against ``scan()`` in each prefilter mode: the
  default (the SQL prefilter on PostgreSQL only), ``"always"`` (so SQLite's
  and MariaDB's are measured too) and ``"never"``;
* **whole process** (what an operator runs): ``python -c`` running that naive
  loop against ``adk-session-heal scan URL --format tsv`` with no flag,
  ``--prefilter`` and ``--full-scan``; the default CLI's peak RSS (``VmHWM``);
* **two shards** side by side (``--shard 1/2`` and ``--shard 2/2``, two
  processes, default mode) against one default whole-process scan; on
  PostgreSQL also both with parallel query off for the database
  (``max_parallel_workers_per_gather = 0``), since its default run already
  uses both cores;
* **repair** through the CLI (``repair --yes``, ledger on) of stores whose
  every session holds one dead call: heals per second.

Usage::

    python benchmarks/bench_fleet.py                                   # everything
    python benchmarks/bench_fleet.py --backends sqlite --sizes 100000 --repair-sessions 5000

Not a test: prints a Markdown table. Best of ``--repeat`` runs for the fast
measures; the naive loop runs once per size (it is the slow baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from stores import APP, USER, Store, bulk_fill, bulk_histories  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_scan import database, filled, naive  # noqa: E402
from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402

from adk_session_heal import ScanOptions, migrate  # noqa: E402
from adk_session_heal.ops.scan import scan  # noqa: E402

NOW = 1_800_000_000.0
CLI = [sys.executable, "-m", "adk_session_heal"]
NAIVE = """
import asyncio, sys
from google.adk.sessions import DatabaseSessionService
from adk_session_heal.core.findings import classify
async def main():
    service = DatabaseSessionService(sys.argv[1])
    listed = await service.list_sessions(app_name=sys.argv[2], user_id=sys.argv[3])
    dead = 0
    for s in listed.sessions:
        session = await service.get_session(app_name=sys.argv[2], user_id=sys.argv[3],
                                            session_id=s.id)
        dead += len(classify(session.events, now=1.8e9, stale_after=86400).dead)
    await service.close()
    print(dead)
asyncio.run(main())
"""
"""The naive loop as an operator's script would run it (one process)."""


async def scan_in_process(store: Store, *, prefilter: str) -> tuple[float, int, int]:
    """``scan()``; returns (seconds, events, dead calls)."""
    started = time.perf_counter()
    report = await scan(store.url, ScanOptions(prefilter=prefilter), now=NOW)  # type: ignore[arg-type]
    return time.perf_counter() - started, report.events_scanned, len(report.dead_calls)


def process(argv: list[str]) -> tuple[float, float, str]:
    """Runs a whole process; returns (seconds, peak RSS in MB, stdout)."""
    code = ("import os, resource, subprocess, sys, time;"
            "t = time.perf_counter();"
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
            "e = time.perf_counter() - t;"
            "print(e, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024);"
            "sys.stdout.write(p.stdout);"
            "sys.exit(0 if p.returncode in (0, 1, 3) else p.returncode)")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         check=True).stdout
    head, _, rest = out.partition("\n")
    seconds, peak = head.split()
    return float(seconds), float(peak), rest


def side_by_side(commands: list[list[str]]) -> float:
    """Runs processes at once; returns the wall time until the last ends."""
    started = time.perf_counter()
    children = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for c in commands]
    for child in children:
        child.wait()
    return time.perf_counter() - started


async def bench_size(backend: str, size: int, args: argparse.Namespace,
                     directory: Path) -> list[str]:
    """Every scan measure on one backend and size."""
    lines = []
    async with database(backend, directory, f"scan{size}") as store:
        await filled(store, size // args.events, args.events, args.dead)
        t_naive = await naive(store)
        modes = {"auto": "default", "always": "--prefilter", "never": "--full-scan"}
        in_process = dict.fromkeys(modes, float("inf"))
        dead = {}
        events = 0
        for _ in range(args.repeat):
            for mode in modes:
                elapsed, events, dead[mode] = await scan_in_process(store, prefilter=mode)
                in_process[mode] = min(in_process[mode], elapsed)
        assert len(set(dead.values())) == 1, dead
        naive_argv = [sys.executable, "-c", NAIVE, store.url, APP, USER]
        p_naive, _, out = process(naive_argv)
        assert int(out) == dead["auto"], (out, dead)
        whole = dict.fromkeys(modes, float("inf"))
        rss = shards = float("inf")
        for _ in range(args.repeat):
            for mode, flag in modes.items():
                argv = [*CLI, "scan", store.url, "--format", "tsv"]
                elapsed, peak, _ = process(argv + ([flag] if mode != "auto" else []))
                whole[mode] = min(whole[mode], elapsed)
                if mode == "auto":
                    rss = min(rss, peak)
            shards = min(shards, side_by_side([
                [*CLI, "scan", store.url, "--format", "tsv", "--shard", f"{n}/2"]
                for n in (1, 2)]))
        label = f"{backend} {events:,} ev"
        lines.append(f"| {label} | naive loop, in-process | {t_naive:.2f} s | 1.0x |")
        lines += [f"| {label} | scan(), {flag} | {in_process[mode]:.2f} s | "
                  f"{t_naive / in_process[mode]:.1f}x naive |" for mode, flag in modes.items()]
        lines.append(f"| {label} | naive loop, whole process | {p_naive:.2f} s | 1.0x |")
        lines += [f"| {label} | CLI scan, {flag} | {whole[mode]:.2f} s | "
                  f"{p_naive / whole[mode]:.1f}x naive process"
                  + (f"; peak RSS {rss:.0f} MB |" if mode == "auto" else " |")
                  for mode, flag in modes.items()]
        lines.append(f"| {label} | 2 CLI shards side by side (default) | {shards:.2f} s | "
                     f"{shards / whole['auto']:.2f}x one default CLI scan |")
        if backend == "postgres":
            lines += await serial_shards(store, label, args.repeat)
    return lines


async def serial_shards(store: Store, label: str, repeat: int) -> list[str]:
    """PostgreSQL with parallel query off for the database: one CLI scan against 2 shards.

    The default run already spreads its query over both cores (parallel
    workers), so two shards side by side cannot halve it on 2 CPUs; this
    shows the split itself, with both sides run one query process each.
    """
    name = store.url.rsplit("/", 1)[1]
    admin = create_async_engine(store.url, isolation_level="AUTOCOMMIT")
    try:
        setting = "max_parallel_workers_per_gather"
        async with admin.connect() as conn:
            await conn.execute(text(f"ALTER DATABASE {name} SET {setting} = 0"))
        one = shards = float("inf")
        for _ in range(repeat):
            one = min(one, process([*CLI, "scan", store.url, "--format", "tsv"])[0])
            shards = min(shards, side_by_side([
                [*CLI, "scan", store.url, "--format", "tsv", "--shard", f"{n}/2"]
                for n in (1, 2)]))
        async with admin.connect() as conn:
            await conn.execute(text(f"ALTER DATABASE {name} RESET {setting}"))
    finally:
        await admin.dispose()
    return [f"| {label} | CLI scan, default, parallel query off | {one:.2f} s | |",
            f"| {label} | 2 CLI shards side by side, parallel query off | {shards:.2f} s | "
            f"{shards / one:.2f}x one CLI scan with parallel query off |"]


async def bench_repair(backend: str, args: argparse.Namespace, directory: Path) -> list[str]:
    """Repair through the CLI: every session holds one dead call."""
    async with database(backend, directory, "repair") as store:
        await bulk_fill(store, bulk_histories(args.repair_sessions, 12, 1.0), chunk=500)
        await migrate.upgrade(store.url)
        before = await scan(store.url, now=NOW)
        elapsed, peak, _ = process([*CLI, "repair", store.url, "--yes", "--format", "tsv"])
        after = await scan(store.url, now=NOW)
        heals = len(before.dead_calls)
        assert heals == args.repair_sessions and not after.dead_calls
        return [f"| {backend} | CLI repair of {heals:,} dead calls (ledger on) "
                f"| {elapsed:.2f} s | {heals / elapsed:,.0f} heals/s; peak RSS {peak:.0f} MB |"]


def main() -> None:
    """Runs the measures and prints the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgres,mariadb")
    parser.add_argument("--sizes", default="100000,1000000",
                        type=lambda s: [int(x) for x in s.split(",") if x])
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--dead", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--repair-sessions", type=int, default=10_000)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; sessions of {args.events} "
          f"events, {args.dead:.0%} with a dead call")
    print("| store | measure | time | ratio |")
    print("| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            for size in args.sizes:
                for line in asyncio.run(bench_size(backend, size, args, Path(tmp))):
                    print(line, flush=True)
            if args.repair_sessions:
                for line in asyncio.run(bench_repair(backend, args, Path(tmp))):
                    print(line, flush=True)


if __name__ == "__main__":
    main()
