"""Benchmark: what HealingSessionService costs on healthy sessions (not a test).

Measures, side by side in one run, on DatabaseSessionService over SQLite:

* ``get_session`` of a clean session (every call answered) of 50, 1,000 and
  10,000 events: bare inner service vs wrapped, read again and again as a
  runner does, and the wrapper's own work on a first read (nothing
  remembered of the session, every event read). Goal: ratio <= 1.01. The
  1,000-event session is also measured over ``InMemorySessionService``
  (issue 13 point 5: "the wrapper's ``get_session`` on a clean 1,000-event
  session <= 1.01x the inner service").
* one full ``Runner`` invocation (get_session, append the user message, one
  model call, append the reply) on a clean 200-event session: bare vs wrapped.
  Goal: ratio <= 1.02.

Bare and wrapped runs alternate (ABAB...) so drift hits both; each row reports
the median of the repetitions. Run: ``python benchmarks/bench_service.py``
(``--quick`` for fewer repetitions, ``--get-session`` for the ``get_session`` rows
only).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions import (
    BaseSessionService,
    DatabaseSessionService,
    InMemorySessionService,
    Session,
)
from google.genai import types

from adk_session_heal import HealingSessionService, classify
from adk_session_heal.core.heal_record import HealTrigger
from adk_session_heal.testing import History, ScriptedModel

APP, USER = "bench", "user"


def clean_history(n_events: int) -> History:
    """Returns a healthy tool-using history of about ``n_events`` events."""
    history = History(start=time.time() - n_events, step=0.5)
    while len(history.events) < n_events:
        history.user("question")
        call = history.call("lookup", {"q": "x"})
        history.respond((call, "lookup"))
        history.text("answer")
    return history


async def seed(service: BaseSessionService, n_events: int) -> str:
    session = await service.create_session(app_name=APP, user_id=USER)
    for event in clean_history(n_events).events:
        await service.append_event(session, event)
    return session.id


async def alternate(
    bare: Callable[[], Awaitable[object]],
    wrapped: Callable[[], Awaitable[object]],
    repetitions: int,
) -> tuple[float, float]:
    """Runs bare and wrapped alternately; returns their median seconds."""
    times: dict[str, list[float]] = {"bare": [], "wrapped": []}
    await bare()
    await wrapped()
    for i in range(repetitions):
        order = (("bare", bare), ("wrapped", wrapped))
        for name, fn in order if i % 2 == 0 else reversed(order):
            gc.collect()
            start = time.perf_counter()
            await fn()
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["bare"]), statistics.median(times["wrapped"])


async def bench_get_session(directory: Path, sizes: list[int], repetitions: int,
                            *, in_memory: bool = False) -> list[tuple]:
    """``get_session`` rows: DatabaseSessionService on SQLite, or ``in_memory``."""
    rows = []
    for size in sizes:
        inner: BaseSessionService = (
            InMemorySessionService() if in_memory
            else DatabaseSessionService(f"sqlite+aiosqlite:///{directory}/get_{size}.db"))
        wrapped = HealingSessionService(inner)
        session_id = await seed(inner, size)
        reps = max(5, repetitions if size < 10_000 else repetitions // 4)

        async def bare_get(inner: BaseSessionService = inner, sid: str = session_id) -> object:
            return await inner.get_session(app_name=APP, user_id=USER, session_id=sid)

        async def wrapped_get(
            wrapped: BaseSessionService = wrapped, sid: str = session_id
        ) -> object:
            return await wrapped.get_session(app_name=APP, user_id=USER, session_id=sid)

        bare_s, wrapped_s = await alternate(bare_get, wrapped_get, reps)
        loaded = await inner.get_session(app_name=APP, user_id=USER, session_id=session_id)
        assert loaded is not None
        label = " (in memory)" if in_memory else ""
        rows.append((f"get_session, {size:,} events{label}", bare_s, wrapped_s, reps, 1.01,
                     await wrapper_cost(wrapped, loaded)))
        rows.append((f"  first read of it (nothing remembered){label}", bare_s, None, reps, 1.01,
                     await wrapper_cost(lambda inner=inner: HealingSessionService(inner), loaded)))
        if isinstance(inner, DatabaseSessionService):
            await inner.close()
    return rows


async def bench_runner(directory: Path, repetitions: int) -> tuple:
    inner_a = DatabaseSessionService(f"sqlite+aiosqlite:///{directory}/runner_bare.db")
    inner_b = DatabaseSessionService(f"sqlite+aiosqlite:///{directory}/runner_wrapped.db")
    wrapped = HealingSessionService(inner_b)
    bare_id = await seed(inner_a, 200)
    wrapped_id = await seed(inner_b, 200)

    def runner_for(service: BaseSessionService) -> Runner:
        model = ScriptedModel(script=[ScriptedModel.say("ok")] * (repetitions + 5))
        agent = LlmAgent(name="bench_agent", model=model, instruction="Answer.")
        return Runner(app_name=APP, agent=agent, session_service=service)

    bare_runner, wrapped_runner = runner_for(inner_a), runner_for(wrapped)
    message = types.Content(role="user", parts=[types.Part(text="hi")])

    async def invoke(runner: Runner, session_id: str) -> None:
        async for _ in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
            pass

    bare_s, wrapped_s = await alternate(
        lambda: invoke(bare_runner, bare_id), lambda: invoke(wrapped_runner, wrapped_id),
        repetitions,
    )
    await inner_a.close()
    await inner_b.close()
    loaded = await inner_b.get_session(app_name=APP, user_id=USER, session_id=wrapped_id)
    assert loaded is not None
    # Per invocation the wrapper reads the session twice: in get_session and at the
    # invocation boundary of the user message's append (an upper bound: nothing remembered).
    added = 2 * await wrapper_cost(lambda: HealingSessionService(inner_b), loaded)
    return ("Runner invocation, 200-event session", bare_s, wrapped_s, repetitions, 1.02, added)


async def wrapper_cost(
    service: HealingSessionService | Callable[[], HealingSessionService], session: Session
) -> float:
    """Median seconds of the work the wrapper adds to a ``get_session`` of a healthy session.

    ``service``: the wrapper that served the timed reads (it remembers the session as
    clean), or a factory of fresh ones (a first read: every event is read).
    """
    samples = []
    for _ in range(50):
        wrapper = service if isinstance(service, HealingSessionService) else service()
        start = time.perf_counter()
        await wrapper._heal(session, HealTrigger.GET_SESSION)  # what get_session adds
        samples.append(time.perf_counter() - start)
        assert not classify(session.events, now=time.time()).needs_healing
    return statistics.median(samples)


def print_table(rows: list[tuple]) -> None:
    print(f"{'measurement':38} {'bare ms':>9} {'wrapped ms':>10} {'ratio':>6} {'goal':>6}"
          f" {'added ms':>9} {'added/bare':>10} {'n':>4}")
    for name, bare_s, wrapped_s, n, goal, added in rows:
        wrapped = "" if wrapped_s is None else f"{wrapped_s * 1e3:.2f}"
        ratio = "" if wrapped_s is None else f"{wrapped_s / bare_s:.3f}"
        print(f"{name:38} {bare_s * 1e3:9.2f} {wrapped:>10} {ratio:>6}"
              f" {'<=' + str(goal):>6} {added * 1e3:9.3f} {1 + added / bare_s:10.4f} {n:4d}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--get-session", action="store_true",
                        help="only the get_session rows of 1,000 events")
    args = parser.parse_args()
    repetitions = 10 if args.quick else 60
    sizes = [1_000] if args.get_session else [50, 1_000, 10_000]
    with tempfile.TemporaryDirectory() as directory:
        rows = await bench_get_session(Path(directory), sizes, repetitions)
        rows += await bench_get_session(Path(directory), [1_000], repetitions, in_memory=True)
        if not args.get_session:
            rows.append(await bench_runner(Path(directory), repetitions))
    print_table(rows)


if __name__ == "__main__":
    asyncio.run(main())
