"""Benchmark: kill a tool turn at every boundary, resume it elsewhere, count what went wrong.

Issue 30, point 5. A fork server: this process imports ADK and the package
once, never opens a connection or an event loop, and forks one child per
process of a scenario. A scenario is one session of a small app whose tool,
``transfer``, has a side effect (it appends a line with the call's idempotency
key to a file). Its processes, each a fresh fork:

1. the first turn (the model calls ``transfer`` once, or twice at once: a
   parallel batch), killed with ``os._exit`` at the drawn boundary;
2. after the dead process's lease ran out (or at once: ``early``), the
   invocation is resumed by ADK (a resumable app,
   ``ResumabilityConfig(is_resumable=True)``) or continued by the user's next
   message, through ``HealingSessionService`` given the same tool-run ledger;
   with some probability this process is killed too (during the resume,
   during a heal, ...), and a third one resumes or continues again;
3. a check: the next reader opens the session through the wrapper (as any
   later reader would), then ADK's own ``get_session`` reads it, and the
   effects file, the ledger and what the model was sent are compared.

Boundaries of a first turn (``BOUNDARIES``): the model's call event before it
is stored and after; in a plugin's before-tool callback, before the ledger's
start record; inside the tool before its side effect and after it; after the
tool returned, before the finish record and after it; the tools' response
event before it is stored and after; the final answer stored. A resume can be
killed at the same tool and store boundaries; a continuation at the heal's
write (before it, inside its transaction before the commit, after the
commit), after the user's message is stored, or after the answer. Per-call
boundaries of a batch pick one of its calls.

Drawn per scenario (seeded: scenario ``i`` of seed ``s`` is the same on every
run, ``--only i`` replays it): the store (SQLite file, PostgreSQL), the app
(``resumable``: ADK resumes the invocation; ``resumable_new``: a resumable
app whose user sends a new message instead; ``plain``: not resumable, the
user's next message), the batch (1 or 2 parallel calls), the tool
(``ignores_key``: every run makes the effect; ``keyed``: the effect goes
through an API that applies each idempotency key once, and the tool is
declared ``idempotent``; ``hooked``: ignores the key, but a reconcile hook
looks the effect up by key), the plugin (on, or off to measure the limits)
and ``early``.

Counted, per call (the goal is 0 of each where the plugin guards the app):

* **double effects**: a call whose effect was applied more than once (a tool
  that ran must have exactly one effect; a ``keyed`` tool's API counts what it
  applied, and the runs of its body are shown apart);
* **results lost**: a call whose ledger record is ``finished`` but whose stored
  answer is not its recorded result, or whose result no model request held;
* **provider 400s**: a scenario where a request the model got, the stored
  session, or the request ADK would build from it next fails a strict
  validator (``adk_session_heal.validators``: OpenAI Chat, Anthropic, Gemini);
* **unreadable**: ADK's own ``get_session`` on the store fails;

and the honesty of each answer: a real result for a call with no effect, or
``not_started`` for one with an effect, is a violation (``false answers``);
"may have run" answers are expected where a run was killed after its start
was recorded, and are counted apart (its effect made, or not).

Scenarios with the plugin off, and plain continuations while the dead
process's lease still runs (``early``), are not guarded by design: they are
counted in a table of their own (the limits the README states).

Run: ``python benchmarks/bench_crash_injection.py`` (``--scenarios N``,
``--stores sqlite,postgres``, ``--seed S``, ``--jobs J``, ``--python PATH``
more than once to run each interpreter's ADK and print one table,
``--json FILE`` for the counts, ``--merge FILE...`` to print saved counts as one table,
``--only I`` with the same ``--seed`` and ``--stores`` to replay one scenario verbosely, its
folder kept).
The PostgreSQL rows need the server of ``tests/support/servers.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, DatabaseSessionService
from google.adk.sessions.session import Session
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.adk.version import __version__ as ADK_VERSION
from google.genai import types

from adk_session_heal import HealingSessionService, HealPolicy, ToolEffect
from adk_session_heal.core.session_key import SessionKey
from adk_session_heal.ledger import SqlToolRunLedger
from adk_session_heal.migrate import upgrade
from adk_session_heal.plugins import ToolRunLedgerPlugin, idempotency_key
from adk_session_heal.policy import DoubtfulCall, Reconciliation, settled
from adk_session_heal.testing import ScriptedModel
from adk_session_heal.validators import adk_request_problems, provider_problems

try:
    from google.adk.apps import ResumabilityConfig
except ImportError:  # pragma: no cover - every supported ADK has it
    ResumabilityConfig = None  # type: ignore[assignment,misc]

PG_HOST = os.environ.get("ADK_HEAL_PG_HOST", "127.0.0.1")
PG_BASE_URL = f"postgresql+asyncpg://postgres@{PG_HOST}:5432"
"""The PostgreSQL server of ``tests/support/servers.py`` (user postgres, trust auth); no
pytest here: an interpreter given with ``--python`` needs only ADK and this package."""

APP, USER, TOOL = "crash", "u", "transfer"
LEASE_SECONDS = 0.4
"""The plugin's lease: short, so a resume after the dead process's lease waits little."""
EARLY_LEASE_SECONDS = 2.0
"""The lease of an ``early`` scenario: the next process surely starts while it is alive."""
AFTER_LEASE = 0.2
"""How long after the lease a process starts when it is not ``early``."""
KILLED = 17
"""The exit code of a process killed at its boundary."""
PHASE_TIMEOUT = 90.0
"""A process still running after this long is killed and its scenario counted as hung."""
PROVIDERS = ("openai_chat", "anthropic", "gemini")

BOUNDARIES = (
    "call_unstored", "call_stored", "before_start", "before_effect", "after_effect",
    "before_finish", "after_finish", "response_unstored", "response_stored", "final_stored",
)
"""Where the first turn is killed: in the order a tool turn passes them."""
PER_CALL = {"before_start", "before_effect", "after_effect", "before_finish", "after_finish"}
"""Boundaries each call of a batch passes on its own (one call is picked)."""
RESUME_KILLS = BOUNDARIES[:-1]
"""Where a resume (ADK replaying the invocation) is killed."""
CONTINUE_KILLS = ("heal_before_write", "heal_in_transaction", "heal_after_commit",
                  "message_stored", "final_stored")
"""Where a continuation (the user's next message, healed on the way) is killed."""
APPS = ("resumable", "resumable_new", "plain")
TOOLS = ("ignores_key", "keyed", "hooked")


@dataclass(frozen=True)
class Scenario:
    """One drawn scenario (every field follows from ``seed`` and ``index``)."""

    seed: int
    index: int
    store: str
    app: str
    batch: int
    tool: str
    plugin: bool
    early: bool
    kill1: str
    kill_call: int
    kill2: str | None

    @property
    def session_id(self) -> str:
        """The scenario's session (unique per seed and index)."""
        return f"s{self.seed}-{self.index}"

    @property
    def lease(self) -> float:
        """The plugin's lease in this scenario."""
        return EARLY_LEASE_SECONDS if self.early else LEASE_SECONDS

    @property
    def guarded(self) -> bool:
        """Whether the package claims the goal here (else it is a limit, counted apart)."""
        return self.plugin and not (self.early and self.app != "resumable")

    @property
    def resumes(self) -> bool:
        """Whether the later processes resume the invocation (else a new message)."""
        return self.app == "resumable"


def draw(seed: int, index: int, stores: tuple[str, ...]) -> Scenario:
    """Draws scenario ``index`` of ``seed`` (independent of every other index)."""
    rng = random.Random(f"{seed}:{index}")
    app = rng.choice(APPS)
    batch = rng.choice((1, 2))
    kill2 = None
    if rng.random() < 0.35:
        kill2 = rng.choice(RESUME_KILLS if app == "resumable" else CONTINUE_KILLS)
    return Scenario(
        seed=seed, index=index, store=rng.choice(stores), app=app, batch=batch,
        tool=rng.choice(TOOLS), plugin=rng.random() >= 0.15, early=rng.random() < 0.25,
        kill1=rng.choice(BOUNDARIES), kill_call=rng.randrange(batch), kill2=kill2)


# -- the child processes -------------------------------------------------------------------


@dataclass
class _Kill:
    """Where the running process dies (``point``; a per-call one at ``call`` only)."""

    point: str | None = None
    call: int = 0
    in_heal: bool = False


_KILL = _Kill()


def boundary(point: str, call_id: str | None = None) -> None:
    """Kills this process with ``os._exit`` if it is to die at ``point`` (of this call)."""
    if _KILL.point != point:
        return
    if call_id is not None and not call_id.endswith(f"-{_KILL.call}"):
        return
    os._exit(KILLED)


def _append(path: Path, line: str) -> None:
    """Appends a line, handed to the kernel before it returns (a killed process loses none)."""
    with path.open("a") as out:
        out.write(line + "\n")


@dataclass(frozen=True)
class Files:
    """A scenario's folder: its effects, tool runs, model requests and result."""

    folder: Path

    @property
    def effects(self) -> Path:
        """One line per effect applied: ``call_id key``."""
        return self.folder / "effects"

    @property
    def bodies(self) -> Path:
        """One line per run of the tool's body: ``call_id key``."""
        return self.folder / "bodies"

    @property
    def returned(self) -> Path:
        """One JSON line per result the tool returned."""
        return self.folder / "returned"

    @property
    def seen(self) -> Path:
        """One JSON line per function response a model request held."""
        return self.folder / "seen"

    @property
    def problems(self) -> Path:
        """One JSON line per provider problem found."""
        return self.folder / "problems"

    @property
    def result(self) -> Path:
        """The check's counts (JSON)."""
        return self.folder / "result.json"

    @property
    def error(self) -> Path:
        """A traceback, if a process failed."""
        return self.folder / "error"


def _tool(sc: Scenario, files: Files) -> Callable[..., Any]:
    """The scenario's ``transfer`` tool."""

    async def transfer(amount: int, tool_context: ToolContext) -> dict[str, Any]:
        """Transfers money (its side effect: a line with the call's idempotency key)."""
        call_id = tool_context.function_call_id or ""
        key = idempotency_key(tool_context)
        boundary("before_effect", call_id)
        _append(files.bodies, f"{call_id} {key}")
        applied = files.effects.read_text().split() if files.effects.exists() else []
        if sc.tool != "keyed" or key not in applied:  # a keyed API applies each key once
            _append(files.effects, f"{call_id} {key}")
        await asyncio.sleep(0)  # the other call of a batch may run now
        boundary("after_effect", call_id)
        result = {"status": "sent", "amount": amount, "receipt": key[:8]}
        _append(files.returned, json.dumps({"call_id": call_id, "result": result}))
        return result

    return transfer


class _Before(BasePlugin):
    """Runs before the ledger's plugin: kills before the start, and before the finish."""

    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        boundary("before_start", tool_context.function_call_id)
        return None

    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                  tool_context: ToolContext,
                                  result: dict[str, Any]) -> dict[str, Any] | None:
        boundary("before_finish", tool_context.function_call_id)
        return None


class _After(BasePlugin):
    """Runs after the ledger's plugin: kills once the finish is recorded."""

    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                  tool_context: ToolContext,
                                  result: dict[str, Any]) -> dict[str, Any] | None:
        boundary("after_finish", tool_context.function_call_id)
        return None


class KillingService(BaseSessionService):
    """Passes everything to the (healing) service; kills before or after an event is stored."""

    def __init__(self, inner: BaseSessionService) -> None:
        self.inner = inner

    async def create_session(self, **kwargs: Any) -> Session:
        return await self.inner.create_session(**kwargs)

    async def get_session(self, **kwargs: Any) -> Session | None:
        return await self.inner.get_session(**kwargs)

    async def list_sessions(self, **kwargs: Any) -> Any:
        return await self.inner.list_sessions(**kwargs)

    async def delete_session(self, **kwargs: Any) -> None:
        await self.inner.delete_session(**kwargs)

    async def append_event(self, session: Session, event: Event) -> Event:
        kind = _event_kind(event)
        if kind:
            boundary(f"{kind}_unstored")
        appended = await self.inner.append_event(session, event)
        if kind:
            boundary(f"{kind}_stored")
        return appended


def _event_kind(event: Event) -> str | None:
    """``call``, ``response``, ``message`` (the user's) or ``final`` (the model's text)."""
    if event.partial:
        return None
    if event.get_function_calls():
        return "call"
    if event.get_function_responses():
        return "response"
    texts = [p.text for p in (event.content.parts or ()) if p.text] if event.content else []
    if not texts:
        return None
    return "message" if event.author == "user" else "final"


def _patch_heal_writes(service: DatabaseSessionService) -> None:
    """Kill points inside the wrapper's heal: before its write, in its transaction, after."""
    from sqlalchemy import event as sa_event

    from adk_session_heal.store.layouts.sql_tables import SqlTablesStore

    original = SqlTablesStore.write

    async def write(self: SqlTablesStore, *args: Any, **kwargs: Any) -> Any:
        boundary("heal_before_write")
        _KILL.in_heal = True
        try:
            written = await original(self, *args, **kwargs)
        finally:
            _KILL.in_heal = False
        boundary("heal_after_commit")
        return written

    SqlTablesStore.write = write  # type: ignore[method-assign]

    def on_commit(_connection: Any) -> None:
        if _KILL.in_heal:
            boundary("heal_in_transaction")

    sa_event.listen(service.db_engine.sync_engine, "commit", on_commit)


def _reply_for(sc: Scenario, phase: int, files: Files) -> Callable[[LlmRequest], LlmResponse]:
    """The model: records what it was sent, calls ``transfer`` for "send", else answers."""

    def reply(request: LlmRequest) -> LlmResponse:
        for content in request.contents:
            for part in content.parts or ():
                if part.function_response is not None:
                    _append(files.seen, json.dumps({
                        "call_id": part.function_response.id,
                        "response": part.function_response.response}, sort_keys=True))
        for provider in PROVIDERS:
            found = provider_problems(request.contents, provider)  # type: ignore[arg-type]
            if found:
                _append(files.problems, json.dumps({
                    "phase": phase, "where": "request", "provider": provider,
                    "problems": [str(p) for p in found]}))
        last = request.contents[-1] if request.contents else None
        parts = (last.parts or []) if last is not None else []
        if any(p.function_response is not None for p in parts):
            return ScriptedModel.say("Done.")
        if any(p.text == "send" for p in parts):
            return LlmResponse(content=types.Content(role="model", parts=[
                types.Part(function_call=types.FunctionCall(
                    id=f"{sc.session_id}-r{phase}-{i}", name=TOOL, args={"amount": i + 1}))
                for i in range(sc.batch)]))
        return ScriptedModel.say("All settled.")

    return reply


def _policy(sc: Scenario, files: Files) -> HealPolicy:
    """The policy the plugin and the wrapper share (one host: no clock skew)."""
    effects: dict[str, ToolEffect] = {}
    reconcile: dict[str, Any] = {}
    if sc.tool == "keyed":
        effects[TOOL] = ToolEffect.IDEMPOTENT
    if sc.tool == "hooked":
        async def transfer_made(call: DoubtfulCall) -> Reconciliation:
            applied = files.effects.read_text().split() if files.effects.exists() else []
            if call.idempotency_key in applied:
                return settled({"status": "sent", "checked": True})
            return settled(happened=False)

        reconcile[TOOL] = transfer_made
    return HealPolicy(clock_skew=0, resumable_app=sc.app != "plain", tool_effects=effects,
                      reconcile=reconcile)


def _agent(sc: Scenario, phase: int, files: Files) -> LlmAgent:
    model = ScriptedModel(script=[_reply_for(sc, phase, files)] * 20, validate=lambda _: [])
    return LlmAgent(name="teller", model=model, tools=[_tool(sc, files)])


def _runner(sc: Scenario, phase: int, files: Files, service: BaseSessionService,
            plugins: list[BasePlugin]) -> Runner:
    agent = _agent(sc, phase, files)
    if sc.app == "plain":
        return Runner(app_name=APP, agent=agent, session_service=service, plugins=plugins)
    app = App(name=APP, root_agent=agent, plugins=plugins,
              resumability_config=ResumabilityConfig(is_resumable=True))
    return Runner(app=app, session_service=service)


def _message(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def run_phase(sc: Scenario, phase: int, url: str, files: Files) -> None:
    """One process of the scenario: the first turn, or a resume or continuation."""
    service = DatabaseSessionService(url)
    ledger = SqlToolRunLedger.from_url(url)
    _patch_heal_writes(service)
    policy = _policy(sc, files)
    healing = HealingSessionService(service, policy,
                                    tool_runs=ledger if sc.plugin else None)
    plugins: list[BasePlugin] = [_Before("crash_before")]
    if sc.plugin:
        plugins.append(ToolRunLedgerPlugin(ledger, lease_seconds=sc.lease, policy=policy))
    plugins.append(_After("crash_after"))
    runner = _runner(sc, phase, files, KillingService(healing), plugins)
    try:
        if phase == 1:
            await service.create_session(app_name=APP, user_id=USER, session_id=sc.session_id)
            turn = runner.run_async(user_id=USER, session_id=sc.session_id,
                                    new_message=_message("send"))
        elif sc.resumes:
            stored = await healing.get_session(app_name=APP, user_id=USER,
                                               session_id=sc.session_id)
            assert stored is not None and stored.events
            turn = runner.run_async(user_id=USER, session_id=sc.session_id,
                                    invocation_id=stored.events[-1].invocation_id)
        else:
            turn = runner.run_async(user_id=USER, session_id=sc.session_id,
                                    new_message=_message("status?"))
        async for _ in turn:
            pass
    finally:
        await runner.close()
        await ledger.close()
        await service.close()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _classify(answer: dict[str, Any] | None) -> str:
    """What a stored answer tells the model: ``result``, or its outcome, or ``error``."""
    if answer is None:
        return "unanswered"
    if "error" not in answer:
        return "result"
    return str(answer.get("outcome") or "error")


async def check(sc: Scenario, url: str, files: Files) -> dict[str, Any]:
    """The next reader opens the session; ADK reads it; every count of the scenario."""
    counts: Counter[str] = Counter()
    service = DatabaseSessionService(url)
    ledger = SqlToolRunLedger.from_url(url)
    detail: dict[str, Any] = {}
    try:
        healing = HealingSessionService(service, _policy(sc, files),
                                        tool_runs=ledger if sc.plugin else None)
        try:
            await healing.get_session(app_name=APP, user_id=USER, session_id=sc.session_id)
        except Exception as exc:  # counted below if ADK's own read fails too
            detail["wrapper_error"] = repr(exc)
        reader = DatabaseSessionService(url)
        try:
            session = await reader.get_session(app_name=APP, user_id=USER,
                                               session_id=sc.session_id)
        except Exception as exc:
            session = None
            detail["unreadable"] = repr(exc)
        finally:
            await reader.close()
        if session is None:
            counts["unreadable"] += 1
            return {"counts": dict(counts), "detail": detail}
        runs = (await ledger.runs(SessionKey(APP, USER, sc.session_id))) if sc.plugin else {}
    finally:
        await ledger.close()
        await service.close()

    bad: list[str] = []
    for provider in PROVIDERS:
        found = provider_problems(session.events, provider)  # type: ignore[arg-type]
        nxt = session.model_copy(deep=True)
        nxt.events.append(Event(author="user", invocation_id="next",
                                content=_message("and now?")))
        found += await adk_request_problems(nxt, _agent(sc, 9, files), provider)  # type: ignore[arg-type]
        bad += [f"stored/{provider}: {p}" for p in found]
    bad += [line for line in _lines(files.problems)]
    if bad:
        counts["provider_400"] += 1
        detail["provider_400"] = bad[:4]

    calls = [c.id for e in session.events for c in e.get_function_calls() if c.id]
    answers: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in session.events:
        for r in e.get_function_responses():
            answers[str(r.id)].append(dict(r.response or {}))
    effects = Counter(line.split()[0] for line in _lines(files.effects))
    bodies = Counter(line.split()[0] for line in _lines(files.bodies))
    seen = {(json.loads(x)["call_id"], json.dumps(json.loads(x)["response"], sort_keys=True))
            for x in _lines(files.seen)}
    returned = {json.loads(x)["call_id"] for x in _lines(files.returned)}
    per_call: dict[str, Any] = {}
    for call_id in dict.fromkeys(calls):
        made = effects[call_id]
        given = answers.get(call_id) or []
        answer = given[-1] if given else None
        said = _classify(answer)
        run = runs.get(call_id)
        counts["calls"] += 1
        counts[f"answer_{said}"] += 1
        if len(given) > 1:
            counts["answered_twice"] += 1
        if bodies[call_id] > 1:
            counts["tool_bodies_run_twice"] += 1
        if made > 1:
            counts["double_effect"] += 1
        if said == "result" and made == 0:
            counts["false_answer"] += 1  # told it happened; it did not
        if said == "not_started" and made > 0:
            counts["false_answer"] += 1  # told it never ran; it did
        if said in ("may_have_run", "unknown", "error"):
            counts[f"in_doubt_{'made' if made else 'not_made'}"] += 1
            if call_id in returned:  # the tool returned, but no record of it survived
                counts["returned_in_doubt"] += 1
        if run is not None and run.state.value == "finished" and run.result is not None:
            recorded = json.dumps(dict(run.result), sort_keys=True)
            if answer != dict(run.result) or (call_id, recorded) not in seen:
                counts["result_lost"] += 1
        per_call[call_id] = {"effects": made, "bodies": bodies[call_id], "answer": said,
                             "record": run.state.value if run else None}
    detail["calls"] = per_call
    return {"counts": dict(counts), "detail": detail}


# -- the fork server ------------------------------------------------------------------------


def _in_child(work: Callable[[], Coroutine[Any, Any, Any]], files: Files | None,
              kill: str | None = None, kill_call: int = 0, quiet: bool = True) -> int:
    """Forks a child that runs ``work`` on a fresh event loop; returns its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if quiet:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
        _KILL.point, _KILL.call = kill, kill_call
        asyncio.run(work())
    except BaseException:
        code = 3
        if files is not None:
            _append(files.error, traceback.format_exc())
    finally:
        os._exit(code)


@dataclass
class _Live:
    """A scenario in progress."""

    sc: Scenario
    files: Files
    url: str
    phase: int = 1
    reached: list[bool] = field(default_factory=list)
    pid: int = 0
    started: float = 0.0
    ready_at: float = 0.0
    checking: bool = False


def _sqlite_template(folder: Path) -> Path:
    """A SQLite file with ADK's tables and the ledger's, copied for each scenario."""
    path = folder / "template.db"
    url = f"sqlite+aiosqlite:///{path}"

    async def build() -> None:
        service = DatabaseSessionService(url)
        await service.list_sessions(app_name=APP, user_id=USER)
        await service.close()
        await upgrade(url)

    _wait_ok(_in_child(build, None))
    return path


def _wait_ok(pid: int) -> None:
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("setting up the store failed")


def _postgres_database(name: str, create: bool) -> str:
    """Creates (with ADK's and the ledger's tables) or drops a database; returns its URL."""
    base = PG_BASE_URL
    url = f"{base}/{name}"

    async def work() -> None:
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        admin = create_async_engine(f"{base}/postgres", isolation_level="AUTOCOMMIT")
        async with admin.connect() as conn:
            if create:
                await conn.execute(text(f"CREATE DATABASE {name}"))
            else:
                await conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        await admin.dispose()
        if create:
            service = DatabaseSessionService(url)
            await service.list_sessions(app_name=APP, user_id=USER)
            await service.close()
            await upgrade(url)

    _wait_ok(_in_child(work, None))
    return url


def _warm_up(root: Path, template: Path | None, pg_url: str) -> None:
    """Imports here what a scenario's processes import lazily, so no child imports it again.

    A child runs a whole scenario once (every kind of process) and lists the
    modules it ended with; this process (the fork server) imports them. Only
    imports: no connection, thread or event loop is left in the server.
    """
    folder = root / "warm-up"
    folder.mkdir()
    if template is not None:
        shutil.copyfile(template, folder / "sessions.db")
    url = f"sqlite+aiosqlite:///{folder / 'sessions.db'}" if template is not None else pg_url
    files = Files(folder)
    listing = folder / "modules"

    async def work() -> None:
        for app in APPS:
            sc = Scenario(seed=-1, index=APPS.index(app), store="warm", app=app, batch=2,
                          tool="hooked", plugin=True, early=False, kill1="final_stored",
                          kill_call=0, kill2=None)
            await run_phase(sc, 1, url, files)
            await run_phase(sc, 2, url, files)
            await check(sc, url, files)
        listing.write_text("\n".join(sorted(sys.modules)))

    _wait_ok(_in_child(work, files))
    for name in listing.read_text().split():
        if name not in sys.modules:
            # A module that imports only in its own context is skipped.
            with contextlib.suppress(Exception):
                importlib.import_module(name)


def _interrupted(signum: int, _frame: Any) -> None:
    """Ends the fork server's run with its clean-up (the PostgreSQL database is dropped)."""
    raise KeyboardInterrupt(f"signal {signum}")


def run(scenarios: list[Scenario], jobs: int, quiet: bool = True,
        keep: bool = False) -> tuple[list[dict[str, Any]], float]:
    """Runs the scenarios, ``jobs`` processes at a time; returns each one's record and the
    wall time."""
    # A RAM disk where there is one: the kills are of processes, not of the machine.
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="crash_bench_", dir=shm if shm.is_dir() else None))
    stores = {sc.store for sc in scenarios}
    template = _sqlite_template(root) if "sqlite" in stores else None
    pg_name = f"crash_bench_{os.getpid()}_{int(time.time())}"
    pg_url = _postgres_database(pg_name, True) if "postgres" in stores else ""
    # SIGTERM (and SIGINT, which a shell's background job ignores) end the run through
    # the clean-up below; each child sets it back to the default.
    signal.signal(signal.SIGTERM, _interrupted)
    _warm_up(root, template, pg_url)
    gc.freeze()  # the server's objects stay shared with its children (no copy on write)
    records: list[dict[str, Any]] = []
    queue = list(reversed(scenarios))
    live: dict[int, _Live] = {}
    waiting: list[_Live] = []
    began = time.monotonic()
    try:
        while queue or live or waiting:
            now = time.monotonic()
            while len(live) < jobs and (waiting or queue):
                ready = [w for w in waiting if w.ready_at <= now]
                if ready:
                    item = min(ready, key=lambda w: w.ready_at)
                    waiting.remove(item)
                elif queue:
                    sc = queue.pop()
                    folder = root / f"scenario-{sc.index}"
                    folder.mkdir()
                    url = pg_url
                    if sc.store == "sqlite":
                        assert template is not None
                        shutil.copyfile(template, folder / "sessions.db")
                        url = f"sqlite+aiosqlite:///{folder / 'sessions.db'}"
                    item = _Live(sc, Files(folder), url)
                else:
                    break
                _spawn(item, quiet)
                live[item.pid] = item
            pid, status = os.waitpid(-1, os.WNOHANG) if live else (0, 0)
            if pid == 0:
                for item in live.values():
                    if time.monotonic() - item.started > PHASE_TIMEOUT:
                        os.kill(item.pid, signal.SIGKILL)
                time.sleep(0.002)
                continue
            item = live.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            record = _advance(item, code, waiting)
            if record is not None:
                records.append(record)
                if not keep:
                    shutil.rmtree(item.files.folder, ignore_errors=True)
    finally:
        if pg_url:
            _postgres_database(pg_name, False)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept: {root}", file=sys.stderr)
    return records, time.monotonic() - began


def _spawn(item: _Live, quiet: bool) -> None:
    sc, files, url = item.sc, item.files, item.url
    item.started = time.monotonic()
    if item.checking:
        async def checked() -> None:
            files.result.write_text(json.dumps(await check(sc, url, files)))

        item.pid = _in_child(checked, files, quiet=quiet)
        return
    kill = sc.kill1 if item.phase == 1 else sc.kill2 if item.phase == 2 else None
    phase = item.phase

    async def ran() -> None:
        await run_phase(sc, phase, url, files)
        if phase >= 2 and not _late_check(sc):  # the last process checks, unless killed
            files.result.write_text(json.dumps(await check(sc, url, files)))

    item.pid = _in_child(ran, files, kill, sc.kill_call if kill in PER_CALL else 0, quiet)


def _late_check(sc: Scenario) -> bool:
    """Whether the check waits for the lease in a process of its own: a plain continuation
    within the dead process's lease leaves the call to a reader after the lease ran out."""
    return sc.early and sc.app != "resumable"


def _advance(item: _Live, code: int, waiting: list[_Live]) -> dict[str, Any] | None:
    """Moves a scenario on after one of its processes ended; its record once it is done."""
    sc = item.sc
    if code not in (0, KILLED) or (item.checking and not item.files.result.exists()):
        error = item.files.error.read_text()[-3000:] if item.files.error.exists() else ""
        return {"scenario": asdict(sc), "reached": item.reached, "failed": True,
                "phase": "check" if item.checking else item.phase, "exit": code,
                "error": error, "counts": {"process_failed": 1}}
    if item.checking or (code == 0 and item.files.result.exists()):
        if not item.checking:
            item.reached.append(False)
        result = json.loads(item.files.result.read_text())
        return {"scenario": asdict(sc), "reached": item.reached, **result}
    item.reached.append(code == KILLED)
    more = code == KILLED and item.phase < 3 and not (item.phase == 2 and not sc.kill2)
    more = more or item.phase == 1
    if more:
        item.phase += 1
    else:
        item.checking = True
    early = sc.early and not item.checking
    item.ready_at = time.monotonic() + (0.0 if early else sc.lease + AFTER_LEASE)
    waiting.append(item)
    return None


# -- the report -----------------------------------------------------------------------------

HEADLINE = ("double_effect", "result_lost", "provider_400", "unreadable")
OTHERS = ("false_answer", "answered_twice", "answer_unanswered", "process_failed")


def table(records: list[dict[str, Any]], adk: str, seconds: float) -> dict[str, Any]:
    """The counts per (store, app, batch), per boundary, and the limits, as plain data."""
    rows: dict[tuple[str, ...], Counter[str]] = defaultdict(Counter)
    for record in records:
        sc = record["scenario"]
        counts = Counter(record.get("counts", {}))
        guarded = sc["plugin"] and not (sc["early"] and sc["app"] != "resumable")
        keys: list[tuple[str, ...]]
        if guarded:
            keys = [("guarded", sc["store"], sc["app"], str(sc["batch"]))]
            keys.append(("boundary", sc["kill1"], sc["kill2"] or "-"))
            keys.append(("tool", sc["tool"]))
        else:
            why = "no plugin" if not sc["plugin"] else "continued within the lease"
            keys = [("limit", why, sc["app"], sc["tool"])]
        for key in keys:
            rows[key]["scenarios"] += 1
            rows[key]["killed_twice"] += int(sum(record.get("reached", [])) >= 2)
            rows[key].update(counts)
    return {"adk": adk, "seconds": seconds, "scenarios": len(records),
            "rows": [{"key": list(k), "counts": dict(v)} for k, v in sorted(rows.items())],
            "failures": [r for r in records if r.get("failed")][:5],
            "violations": [r for r in records if _violates(r, True)][:20],
            "limit_examples": [r for r in records if _violates(r, False)][:20]}


def _violates(record: dict[str, Any], guarded: bool) -> bool:
    """Whether a (guarded, or else unguarded) scenario counted anything that should be 0."""
    sc = record["scenario"]
    is_guarded = sc["plugin"] and not (sc["early"] and sc["app"] != "resumable")
    counts = record.get("counts", {})
    return is_guarded == guarded and any(counts.get(k) for k in (*HEADLINE, *OTHERS))


COLUMNS = ("scenarios", "killed_twice", "calls", "double_effect", "result_lost",
           "provider_400", "unreadable", "false_answer", "answer_unanswered", "process_failed",
           "answer_result", "in_doubt_made", "in_doubt_not_made", "returned_in_doubt",
           "answer_not_started", "tool_bodies_run_twice")
SHORT = ("scen.", "2nd kill", "calls", "double", "lost", "400s", "unread.", "false", "unans.",
         "failed", "result", "doubt+eff", "doubt-eff", "returned+doubt", "not_started",
         "body x2")


def combine(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One report per ADK line: the rows of its runs (e.g. chunks of ``--first``) added up."""
    merged: dict[str, dict[str, Any]] = {}
    for report in reports:
        into = merged.setdefault(report["adk"], {
            "adk": report["adk"], "seconds": 0.0, "scenarios": 0, "rows": [], "failures": [],
            "violations": [], "limit_examples": []})
        into["seconds"] += report["seconds"]
        into["scenarios"] += report["scenarios"]
        for name in ("failures", "violations", "limit_examples"):
            into[name] += report.get(name, [])
        rows = {tuple(row["key"]): Counter(row["counts"]) for row in into["rows"]}
        for row in report["rows"]:
            rows.setdefault(tuple(row["key"]), Counter()).update(row["counts"])
        into["rows"] = [{"key": list(k), "counts": dict(v)} for k, v in sorted(rows.items())]
    return list(merged.values())


def print_tables(reports: list[dict[str, Any]]) -> None:
    """Prints each ADK line's tables, then the totals."""
    totals: Counter[str] = Counter()
    limit_totals: Counter[str] = Counter()
    for report in reports:
        for kind, title in (("guarded", "store / app / batch"), ("tool", "tool"),
                            ("boundary", "first kill / second kill"),
                            ("limit", "limit / app / tool")):
            print(f"\nADK {report['adk']}, {'limits' if kind == 'limit' else 'guarded'}: "
                  f"{title}")
            print("| " + " | ".join([title, *SHORT]) + " |")
            print("|---" + "|---:" * len(SHORT) + "|")
            for row in report["rows"]:
                if row["key"][0] != kind:
                    continue
                c = row["counts"]
                print("| " + " | ".join([" / ".join(row["key"][1:]),
                                         *(f"{c.get(k, 0):,}" for k in COLUMNS)]) + " |")
                if kind == "guarded":
                    totals.update(c)
                if kind == "limit":
                    limit_totals.update(c)
        rate = report["scenarios"] / report["seconds"] if report["seconds"] else 0.0
        print(f"\nADK {report['adk']}: {report['scenarios']:,} scenarios in "
              f"{report['seconds']:.0f} s ({rate:.1f} scenarios/s)")
        for failure in report["failures"]:
            print(f"FAILED: {json.dumps(failure)[:1500]}")
        for violation in report["violations"]:
            print(f"VIOLATION: {json.dumps(violation)[:1500]}")
    print("\nTotals, guarded: " + ", ".join(f"{k} {totals.get(k, 0):,}" for k in COLUMNS))
    print("Totals, limits: " + ", ".join(f"{k} {limit_totals.get(k, 0):,}" for k in COLUMNS))


def _postgres_up() -> bool:
    """Whether the PostgreSQL server accepts connections."""
    try:
        with socket.create_connection((PG_HOST, 5432), timeout=1.0):
            return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", type=int, default=10_000)
    parser.add_argument("--first", type=int, default=0, help="the first scenario's index")
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--python", action="append", default=[],
                        help="run under each of these interpreters (each its own ADK)")
    parser.add_argument("--json", help="write the counts here")
    parser.add_argument("--merge", nargs="+", help="print the tables of these --json files")
    parser.add_argument("--only", type=int, help="replay one scenario, keeping its folder")
    args = parser.parse_args()
    if args.merge:
        reports = [r for name in args.merge for r in json.loads(Path(name).read_text())]
        print_tables(combine(reports))
        return
    stores = tuple(args.stores.split(","))
    if "postgres" in stores and not _postgres_up():
        print("no PostgreSQL server: SQLite only", file=sys.stderr)
        stores = tuple(s for s in stores if s != "postgres") or ("sqlite",)
    if args.only is not None:
        scenario = draw(args.seed, args.only, stores)
        print(json.dumps(asdict(scenario)))
        records, _ = run([scenario], 1, quiet=False, keep=True)
        print(json.dumps(records, indent=1))
        return
    if args.python:
        reports = []
        for python in args.python:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                command = [python, __file__, "--scenarios", str(args.scenarios),
                           "--first", str(args.first), "--seed", str(args.seed),
                           "--stores", ",".join(stores), "--jobs", str(args.jobs),
                           "--json", out.name]
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
                reports += json.loads(Path(out.name).read_text())
    else:
        scenarios = [draw(args.seed, i, stores)
                     for i in range(args.first, args.first + args.scenarios)]
        records, seconds = run(scenarios, args.jobs)
        reports = [table(records, ADK_VERSION, seconds)]
    if args.json:
        Path(args.json).write_text(json.dumps(reports))
    print_tables(reports)


if __name__ == "__main__":
    main()
