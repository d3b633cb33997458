"""Benchmark of two store shapes (issue 31), each against the naive loop and a baseline checkout.

Two generated, deterministic shapes, written with exactly the rows ADK's
``DatabaseSessionService`` writes (``event_data`` is
``Event.model_dump(exclude_none=True, mode="json")`` of a real
``google.adk.events.Event``):

* **realistic**: sessions of 50 events: user text, model text with usage
  metadata, function-call events (12 % with two parallel calls, 30 % with a
  text part before the call), one merged function-response event per call
  event, some with a ``state_delta``; 5 % of sessions end with a dead call;
  every timestamp two to three days old;
* **all-dead**: sessions of 12 events, each holding one dead call that a later
  turn supersedes (so the prefilter keeps every session).

Measured per backend (``sqlite``, ``postgres``, ``mariadb``), each timing in a
child process whose ``PYTHONPATH`` picks the checkout, the checkouts alternating
(this one, and the ``--baseline`` one when given):

* realistic shape: the naive loop (``list_sessions`` + ``get_session`` +
  ``classify`` through ADK's service) in-process and as a whole process; the
  floor (one plain ``SELECT`` of every row plus JSON decoding, in-process);
  ``scan()`` in-process (best of ``--repeat`` calls in one child) and the
  whole CLI process (``adk-session-heal scan URL --format tsv``), per checkout;
  the CLI's peak RSS (``VmHWM``) at each of ``--rss-sizes``;
* all-dead shape: ``adk-session-heal repair URL --yes --format tsv`` (ledger on,
  whole process, start-up included) and ``repair()`` in-process, each on a
  fresh copy of the store, per checkout: heals per second.

Usage (from any directory, ``PYTHONPATH`` naming this checkout)::

    python benchmarks/bench_shapes.py --backends sqlite,postgres,mariadb
    python benchmarks/bench_shapes.py --baseline ../other-checkout --pairs 3 \\
        --rss-sizes 100000,1000000

Not a test: prints Markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
APP, USER, AGENT = "app", "user", "assistant"
DAY = 86_400.0

# ---------------------------------------------------------------------------------------------
# Child measurements: run with PYTHONPATH naming the checkout measured; they import nothing
# from this checkout's tests.
# ---------------------------------------------------------------------------------------------

CHILD_SCAN = """
import asyncio, gc, json, sys, time
from adk_session_heal.ops.scan import scan
async def main():
    times = []
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter()
        report = await scan(sys.argv[1])
        times.append(time.perf_counter() - t)
        gc.collect()
    print(json.dumps({"times": times, "events": report.events_scanned,
                      "dead": len(report.dead_calls)}))
asyncio.run(main())
"""
"""``scan()`` called ``argv[2]`` times in one process, each call timed."""

CHILD_REPAIR = """
import asyncio, json, sys, time
from adk_session_heal.ops.repair import repair
async def main():
    t = time.perf_counter()
    report = await repair(sys.argv[1])
    print(json.dumps({"seconds": time.perf_counter() - t, "healed": report.healed}))
asyncio.run(main())
"""
"""``repair()`` once, in-process (the ledger on)."""

CHILD_NAIVE = """
import asyncio, json, sys, time
from google.adk.sessions import DatabaseSessionService
from adk_session_heal.core.findings import classify
async def main():
    service = DatabaseSessionService(sys.argv[1])
    t = time.perf_counter()
    listed = await service.list_sessions(app_name=sys.argv[2], user_id=sys.argv[3])
    dead = events = 0
    for s in listed.sessions:
        session = await service.get_session(app_name=sys.argv[2], user_id=sys.argv[3],
                                            session_id=s.id)
        events += len(session.events)
        dead += len(classify(session.events, now=time.time(), stale_after=86400).dead)
    seconds = time.perf_counter() - t
    await service.close()
    if sys.argv[4] == "whole":
        print(dead)
    else:
        print(json.dumps({"seconds": seconds, "events": events, "dead": dead}))
asyncio.run(main())
"""
"""The naive loop as an operator's script runs it: ADK's service, then ``classify``."""

CHILD_FLOOR = """
import asyncio, json, sqlite3, sys, time
import msgspec
decode = msgspec.json.decode
SQL = ("SELECT app_name, user_id, session_id, id, invocation_id, timestamp, event_data "
       "FROM events")
async def main():
    url, times = sys.argv[1], []
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter()
        rows = 0
        if url.startswith("sqlite"):
            db = sqlite3.connect(url.split(":///", 1)[1])
            for row in db.execute(SQL):
                decode(row[6]); rows += 1
            db.close()
        elif url.startswith("postgresql"):
            import asyncpg
            conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
            await conn.set_type_codec("jsonb", encoder=msgspec.json.encode, decoder=decode,
                                      schema="pg_catalog")
            await conn.set_type_codec("json", encoder=msgspec.json.encode, decoder=decode,
                                      schema="pg_catalog")
            async with conn.transaction():
                cursor = await conn.cursor(SQL)
                while chunk := await cursor.fetch(2000):
                    rows += len(chunk)
            await conn.close()
        else:
            import aiomysql
            rest = url.split("://", 1)[1]
            user, rest = rest.split("@", 1)
            host, database = rest.split("/", 1)
            host, port = host.split(":")
            conn = await aiomysql.connect(host=host, port=int(port), user=user, db=database)
            cursor = await conn.cursor(aiomysql.SSCursor)
            await cursor.execute(SQL)
            while chunk := await cursor.fetchmany(2000):
                for row in chunk:
                    decode(row[6]); rows += 1
            await cursor.close()
            conn.close()
        times.append(time.perf_counter() - t)
    print(json.dumps({"times": times, "rows": rows}))
asyncio.run(main())
"""
"""The floor: one plain ``SELECT`` of every row's columns, ``event_data`` decoded by msgspec."""

CHILD_RSS = """
import os, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
e = time.perf_counter() - t
print(e, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, p.returncode)
sys.stderr.write(p.stderr[-2000:])
"""
"""A whole process, timed from outside; prints (seconds, peak RSS in MB, exit code)."""


@dataclass(frozen=True)
class Checkout:
    """A checkout measured: its label and the directory ``PYTHONPATH`` names."""

    label: str
    path: Path

    def env(self) -> dict[str, str]:
        """The environment of a child measuring this checkout."""
        return {**os.environ, "PYTHONPATH": str(self.path)}


def run_child(checkout: Checkout, code: str, *args: str) -> Any:
    """Runs ``python -c code args`` for the checkout (cwd: a temporary directory); its JSON."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=checkout.env(), cwd=tempfile.gettempdir(), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{checkout.label}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def whole_process(checkout: Checkout, argv: list[str]) -> tuple[float, float]:
    """Runs a whole process for the checkout; returns (seconds, peak RSS in MB)."""
    done = subprocess.run([sys.executable, "-c", CHILD_RSS, *argv], capture_output=True,
                          text=True, env=checkout.env(), cwd=tempfile.gettempdir(), check=True)
    seconds, peak, code = done.stdout.split()
    if int(code) not in (0, 1, 3):
        raise RuntimeError(f"{checkout.label}: {argv[:4]} exited {code}: {done.stderr}")
    return float(seconds), float(peak)


def cli(url: str, *args: str) -> list[str]:
    """The command line of ``adk-session-heal`` (as ``python -m``)."""
    return [sys.executable, "-m", "adk_session_heal", *args[:1], url, *args[1:]]


# ---------------------------------------------------------------------------------------------
# The shapes, generated deterministically.
# ---------------------------------------------------------------------------------------------


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def realistic_session(rng: random.Random, events: int, dead: bool, start: float) -> list[Any]:
    """One realistic session of ``events`` ADK events (its last a dead call when ``dead``)."""
    from google.adk.events import Event, EventActions
    from google.genai import types

    result: list[Any] = []
    clock = [start]

    def stamp() -> float:
        clock[0] += rng.uniform(0.2, 4.0)
        return clock[0]

    def usage() -> Any:
        prompt = rng.randrange(200, 8000)
        out = rng.randrange(5, 400)
        return types.GenerateContentResponseUsageMetadata(
            prompt_token_count=prompt, candidates_token_count=out, total_token_count=prompt + out)

    def model_text(invocation: str) -> Any:
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(8, 60)))
        return Event(id=_uuid(rng), invocation_id=invocation, author=AGENT, timestamp=stamp(),
                     content=types.Content(role="model", parts=[types.Part(text=words)]),
                     usage_metadata=usage())

    def call_event(invocation: str) -> tuple[Any, list[tuple[str, str]]]:
        parts = []
        if rng.random() < 0.30:
            parts.append(types.Part(text="Let me check that for you."))
        calls = []
        for _ in range(2 if rng.random() < 0.12 else 1):
            name = rng.choice(TOOLS)
            call_id = f"adk-{_uuid(rng)}"
            calls.append((call_id, name))
            parts.append(types.Part(function_call=types.FunctionCall(
                id=call_id, name=name, args={"query": rng.choice(WORDS), "limit": 10})))
        event = Event(id=_uuid(rng), invocation_id=invocation, author=AGENT, timestamp=stamp(),
                      content=types.Content(role="model", parts=parts), usage_metadata=usage())
        return event, calls

    def response_event(invocation: str, calls: list[tuple[str, str]]) -> Any:
        parts = [types.Part(function_response=types.FunctionResponse(
            id=call_id, name=name,
            response={"result": {"items": [rng.choice(WORDS) for _ in range(rng.randrange(1, 6))],
                                 "count": rng.randrange(100)}}))
            for call_id, name in calls]
        actions = EventActions(state_delta={"last_tool": calls[0][1],
                                            "hits": rng.randrange(100)}) \
            if rng.random() < 0.25 else EventActions()
        return Event(id=_uuid(rng), invocation_id=invocation, author=AGENT, timestamp=stamp(),
                     content=types.Content(role="user", parts=parts), actions=actions)

    def user(invocation: str) -> Any:
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 25)))
        return Event(id=_uuid(rng), invocation_id=invocation, author="user", timestamp=stamp(),
                     content=types.Content(role="user", parts=[types.Part(text=words)]))

    # The body: turns of user + (call + response)* + text, then a dead call when asked.
    room = events - (2 if dead else 0)
    while len(result) < room:
        invocation = f"e-{_uuid(rng)}"
        left = room - len(result)
        if left == 1:
            result.append(model_text(result[-1].invocation_id if result else invocation))
            break
        result.append(user(invocation))
        left -= 1
        while left >= 3 and rng.random() < 0.55:
            call, calls = call_event(invocation)
            result += [call, response_event(invocation, calls)]
            left -= 2
        result.append(model_text(invocation))
    if dead:
        invocation = f"e-{_uuid(rng)}"
        result.append(user(invocation))
        result.append(call_event(invocation)[0])
    assert len(result) == events, (len(result), events)
    return result


WORDS = ("weather", "Paris", "invoice", "order", "refund", "flight", "status", "account",
         "balance", "shipping", "address", "the", "a", "please", "when", "why", "how", "update",
         "ticket", "delivery", "price", "plan", "upgrade", "cancel", "today", "tomorrow")
TOOLS = ("get_weather", "lookup_order", "search_docs", "get_balance", "create_ticket",
         "list_flights", "track_parcel")


def realistic_shape(sessions: int, events: int, *, seed: int = 31,
                    distinct: int = 500) -> list[list[dict[str, Any]]]:
    """The realistic shape: each session's ``events`` rows (without their key columns).

    ``distinct`` sessions are generated and repeated (under new session ids) to
    fill large stores quickly; 5 % of them end with a dead call. Timestamps lie
    two to three days before the start of the current hour.
    """
    from adk_session_heal.core.adk_compat import timestamp_to_column

    rng = random.Random(seed)
    now = time.time() // 3600 * 3600
    made = []
    for index in range(min(sessions, distinct)):
        start = now - 3 * DAY + rng.random() * (DAY - 3600)
        history = realistic_session(rng, events, index % 20 == 7, start)
        made.append([{"id": e.id, "invocation_id": e.invocation_id,
                      "timestamp": timestamp_to_column(e.timestamp),
                      "event_data": e.model_dump(exclude_none=True, mode="json")}
                     for e in history])
    return [made[i % len(made)] for i in range(sessions)]


def all_dead_shape(sessions: int, *, seed: int = 13) -> list[list[dict[str, Any]]]:
    """The all-dead shape: 12 events per session, one superseded dead call each."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from stores import bulk_histories

    from adk_session_heal.core.adk_compat import timestamp_to_column

    start = time.time() // 3600 * 3600 - 2.5 * DAY
    histories = bulk_histories(sessions, 12, 1.0, seed=seed, start=start)
    return [[{"id": e.id, "invocation_id": e.invocation_id,
              "timestamp": timestamp_to_column(e.timestamp),
              "event_data": e.model_dump(exclude_none=True, mode="json")}
             for e in history.events] for history in histories]


async def write_shape(url: str, kind: str, shape: list[list[dict[str, Any]]]) -> None:
    """Writes the sessions as ADK does: its tables made by its own service, rows in bulk."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from google.adk.sessions import DatabaseSessionService
    from google.adk.sessions.schemas.v1 import StorageEvent, StorageSession
    from sqlalchemy import delete, insert
    from sqlalchemy.ext.asyncio import create_async_engine

    service = DatabaseSessionService(url)
    await service.create_session(app_name=APP, user_id=USER, session_id="seed")
    await service.close()
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:  # the seed session held no events; drop it
            await conn.execute(delete(StorageSession.__table__))
        chunk = 200
        for first in range(0, len(shape), chunk):
            async with engine.begin() as conn:
                sessions, rows = [], []
                for index in range(first, min(first + chunk, len(shape))):
                    session_id = f"s{index:07d}"
                    last = shape[index][-1]["timestamp"]
                    sessions.append({"app_name": APP, "user_id": USER, "id": session_id,
                                     "state": {}, "create_time": last, "update_time": last})
                    rows.extend({**row, "app_name": APP, "user_id": USER,
                                 "session_id": session_id} for row in shape[index])
                await conn.execute(insert(StorageSession.__table__), sessions)
                await conn.execute(insert(StorageEvent.__table__), rows)
    finally:
        await engine.dispose()
    del kind


@asynccontextmanager
async def database(backend: str, directory: Path, name: str) -> AsyncIterator[str]:
    """A fresh database of the backend: its URL (server databases dropped after)."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{directory / name}.db"
        return
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from servers import temporary_database

    async with temporary_database(backend) as url:
        yield url


@asynccontextmanager
async def copies(backend: str, url: str, directory: Path) -> AsyncIterator[Callable[[], Any]]:
    """Yields a factory of fresh copies of a store (each dropped when the block ends)."""
    made: list[str] = []
    counter = [0]

    async def copy() -> str:
        counter[0] += 1
        if backend == "sqlite":
            source = Path(url.split(":///", 1)[1])
            target = directory / f"copy{counter[0]}.db"
            shutil.copyfile(source, target)
            made.append(str(target))
            return f"sqlite+aiosqlite:///{target}"
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        base, source = url.rsplit("/", 1)
        name = f"{source}_c{counter[0]}"
        admin_db = "postgres" if backend == "postgres" else "mysql"
        admin = create_async_engine(f"{base}/{admin_db}", isolation_level="AUTOCOMMIT")
        try:
            async with admin.connect() as conn:
                if backend == "postgres":
                    await conn.execute(text(f"CREATE DATABASE {name} TEMPLATE {source}"))
                else:
                    await conn.execute(text(f"CREATE DATABASE {name}"))
                    tables = [r[0] for r in await conn.execute(text(
                        "SELECT table_name FROM information_schema.tables "
                        f"WHERE table_schema = '{source}'"))]
                    for table in tables:
                        await conn.execute(text(
                            f"CREATE TABLE {name}.{table} LIKE {source}.{table}"))
                    for table in ("sessions", "events", *[t for t in tables
                                                         if t not in ("sessions", "events")]):
                        await conn.execute(text(
                            f"INSERT INTO {name}.{table} SELECT * FROM {source}.{table}"))
        finally:
            await admin.dispose()
        made.append(f"{base}/{name}")
        return f"{base}/{name}"

    try:
        yield copy
    finally:
        if backend != "sqlite" and made:
            from sqlalchemy import text
            from sqlalchemy.ext.asyncio import create_async_engine

            base = url.rsplit("/", 1)[0]
            admin_db = "postgres" if backend == "postgres" else "mysql"
            admin = create_async_engine(f"{base}/{admin_db}", isolation_level="AUTOCOMMIT")
            try:
                async with admin.connect() as conn:
                    for made_url in made:
                        name = made_url.rsplit("/", 1)[1]
                        force = " WITH (FORCE)" if backend == "postgres" else ""
                        await conn.execute(text(f"DROP DATABASE IF EXISTS {name}{force}"))
            finally:
                await admin.dispose()


# ---------------------------------------------------------------------------------------------
# The measures.
# ---------------------------------------------------------------------------------------------


def _fmt(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


async def bench_realistic(backend: str, args: argparse.Namespace, checkouts: list[Checkout],
                          directory: Path) -> list[str]:
    """The realistic shape at ``--sessions`` x ``--events``: naive, floor, scan, CLI."""
    lines = []
    shape = realistic_shape(args.sessions, args.events)
    async with database(backend, directory, "realistic") as url:
        await write_shape(url, backend, shape)
        current = checkouts[0]
        naive = run_child(current, CHILD_NAIVE, url, APP, USER, "in")
        events, dead = naive["events"], naive["dead"]
        naive_whole, _ = whole_process(current, [sys.executable, "-c", CHILD_NAIVE, url, APP,
                                                 USER, "whole"])
        floor = run_child(current, CHILD_FLOOR, url, str(args.repeat))
        in_process: dict[str, list[float]] = {c.label: [] for c in checkouts}
        whole: dict[str, list[float]] = {c.label: [] for c in checkouts}
        for _ in range(args.pairs):
            for checkout in checkouts:
                got = run_child(checkout, CHILD_SCAN, url, str(args.repeat))
                assert got["events"] == events and got["dead"] == dead, (got, events, dead)
                in_process[checkout.label].append(min(got["times"]))
            for checkout in checkouts:
                seconds, _ = whole_process(checkout, cli(url, "scan", "--format", "tsv"))
                whole[checkout.label].append(seconds)
        t_floor = min(floor["times"])
        label = f"{backend} {events:,} ev"
        lines.append(f"| {label} | naive loop, in-process | {naive['seconds']:.2f} s | 1.0x | |")
        lines.append(f"| {label} | floor: plain SELECT + msgspec decode, in-process "
                     f"| {t_floor:.2f} s | {naive['seconds'] / t_floor:.1f}x naive | |")
        for checkout in checkouts:
            best = min(in_process[checkout.label])
            lines.append(
                f"| {label} | scan(), {checkout.label} (best per child: "
                f"{_fmt(in_process[checkout.label])} s) | {best:.2f} s | "
                f"{naive['seconds'] / best:.1f}x naive | {best / t_floor:.2f}x floor |")
        lines.append(f"| {label} | naive loop, whole process | {naive_whole:.2f} s | 1.0x | |")
        for checkout in checkouts:
            best = min(whole[checkout.label])
            median = statistics.median(whole[checkout.label])
            lines.append(
                f"| {label} | CLI scan, {checkout.label} ({_fmt(whole[checkout.label])} s) | "
                f"{best:.2f} s | {naive_whole / best:.1f}x naive process "
                f"(median {naive_whole / median:.1f}x) | |")
    return lines


async def bench_rss(backend: str, args: argparse.Namespace, checkouts: list[Checkout],
                    directory: Path) -> list[str]:
    """The CLI scan's peak RSS at each of ``--rss-sizes`` (the realistic shape)."""
    lines = []
    peaks: dict[str, list[tuple[int, float, float]]] = {c.label: [] for c in checkouts}
    for size in args.rss_sizes:
        shape = realistic_shape(size // args.events, args.events)
        async with database(backend, directory, f"rss{size}") as url:
            await write_shape(url, backend, shape)
            del shape
            for checkout in checkouts:
                seconds, peak = whole_process(checkout, cli(url, "scan", "--format", "tsv"))
                peaks[checkout.label].append((size, seconds, peak))
    for checkout in checkouts:
        for size, seconds, peak in peaks[checkout.label]:
            lines.append(f"| {backend} {size:,} ev | CLI scan peak RSS, {checkout.label} "
                         f"| {seconds:.2f} s | {peak:.0f} MB | |")
    return lines


async def bench_all_dead(backend: str, args: argparse.Namespace, checkouts: list[Checkout],
                         directory: Path) -> list[str]:
    """The all-dead shape: CLI ``repair --yes`` and ``repair()`` on fresh copies, alternating."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    lines = []
    shape = all_dead_shape(args.dead_sessions)
    async with database(backend, directory, "alldead") as url:
        await write_shape(url, backend, shape)
        migrate = subprocess.run([sys.executable, "-m", "adk_session_heal", "db", "upgrade", url],
                                 env=checkouts[0].env(), cwd=tempfile.gettempdir(),
                                 capture_output=True, text=True, check=False)
        if migrate.returncode != 0:
            raise RuntimeError(migrate.stderr)
        whole: dict[str, list[tuple[float, float]]] = {c.label: [] for c in checkouts}
        inproc: dict[str, list[float]] = {c.label: [] for c in checkouts}
        async with copies(backend, url, directory) as copy:
            for _ in range(args.pairs):
                for checkout in checkouts:
                    target = await copy()
                    seconds, peak = whole_process(checkout, cli(target, "repair", "--yes",
                                                                "--format", "tsv"))
                    scanned = run_child(checkout, CHILD_SCAN, target, "1")
                    assert scanned["dead"] == 0, scanned
                    whole[checkout.label].append((seconds, peak))
                for checkout in checkouts:
                    target = await copy()
                    got = run_child(checkout, CHILD_REPAIR, target)
                    assert got["healed"] == args.dead_sessions, got
                    inproc[checkout.label].append(got["seconds"])
    heals = args.dead_sessions
    for checkout in checkouts:
        runs = whole[checkout.label]
        best = min(s for s, _ in runs)
        rates = " / ".join(f"{heals / s:,.0f}" for s, _ in runs)
        lines.append(f"| {backend} {heals:,} dead sessions | CLI repair --yes, {checkout.label} "
                     f"({rates} heals/s) | {best:.2f} s | {heals / best:,.0f} heals/s; peak RSS "
                     f"{max(p for _, p in runs):.0f} MB | |")
    for checkout in checkouts:
        runs_in = inproc[checkout.label]
        best = min(runs_in)
        rates = " / ".join(f"{heals / s:,.0f}" for s in runs_in)
        lines.append(f"| {backend} {heals:,} dead sessions | repair(), {checkout.label} "
                     f"({rates} heals/s) | {best:.2f} s | {heals / best:,.0f} heals/s | |")
    return lines


def main() -> None:
    """Runs the measures and prints the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgres,mariadb")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout, measured alternately with this one")
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--dead-sessions", type=int, default=10_000)
    parser.add_argument("--rss-sizes", default="100000,1000000",
                        type=lambda s: [int(x) for x in s.split(",") if x])
    parser.add_argument("--repeat", type=int, default=3, help="scan() calls per child")
    parser.add_argument("--pairs", type=int, default=3, help="alternating runs per checkout")
    parser.add_argument("--only", default="realistic,rss,dead")
    args = parser.parse_args()
    checkouts = [Checkout("this", ROOT)]
    if args.baseline is not None:
        checkouts.append(Checkout("baseline", args.baseline.resolve()))
    load = os.getloadavg()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load[0]:.2f}; "
          f"realistic: {args.sessions:,} sessions x {args.events} events; all-dead: "
          f"{args.dead_sessions:,} sessions x 12 events; checkouts: "
          + ", ".join(c.label for c in checkouts))
    print("| store | measure | time | ratio | floor |")
    print("| --- | --- | --- | --- | --- |")
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            steps = [("realistic", bench_realistic), ("rss", bench_rss), ("dead", bench_all_dead)]
            for name, step in steps:
                if name in only:
                    for line in asyncio.run(step(backend, args, checkouts, Path(tmp))):
                        print(line, flush=True)
    load = os.getloadavg()
    print(f"load at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")


if __name__ == "__main__":
    main()
