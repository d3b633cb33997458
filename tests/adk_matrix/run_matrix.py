"""The real-reader matrix: each supported google-adk line writes, we heal, it reads.

Run it as ``.ci/adk-matrix`` (CI does, after the tests). For each ADK version
(the newest patch of each line in :data:`LINES`, resolved from the package
index) it keeps a virtual environment in
``${ADK_SESSION_HEAL_CACHE:-~/.cache/adk-session-heal}/adk-venvs/<version>``
(built once with that ADK pinned and its database drivers, rebuilt only when
missing or broken), installs this checkout into it, and runs, per version:

* ``pip``: pip's resolver accepts ``<this package> google-adk==<version>``
  (``pip install --dry-run``) without replacing that ADK;
* ``install``: the package is installed (``--no-deps``) and that ADK is still
  the one installed;
* ``api``: ``HealingSessionService`` implements every public method of that
  ADK's ``BaseSessionService`` (``api_check.py``);
* ``order``: a heal stored after a later turn (the ``append_event`` path), then
  one more turn through that ADK's real ``Runner``: the model's request holds
  the heal right after its call and passes every provider rule, and
  ``adk_request_contents`` builds the same contents (``order_check.py``);
* ``late``: a healed call's real response arrives later (stored by another
  process, or as a turn's new message): the heal is taken back out and that
  ADK's ``Runner`` sends the model one answer, the real one, exactly what it
  sends for a call that was never healed (``late_check.py``);
* ``rerun``: with ``RerunSafeCallsPlugin``, the user's next turn through that
  ADK's ``Runner`` runs a dead read-only call again (once) through that ADK's
  own tool path (a guard's refusal and a masking after-callback are what is
  stored) and stores its answer before the message, heals the side-effect call
  of the same turn, and the model's request breaks no provider rule
  (``rerun_check.py``);
* ``odd``: 3,000 seeded histories with odd calls (empty names, shared and
  reused ids, text between calls, ...), each followed by the user's next
  message: healing never makes the request that ADK builds worse for any
  provider's validator (``odd_check.py``);
* ``sorted``: a ``DatabaseSessionService`` subclass written through its own
  ``append_event`` (as an encrypting store is): a real ``Runner`` turn heals as
  it reads, the heal is stored right after its call, before the later turns,
  and the runner appends on (``sorted_check.py``);
* ``replay``: a resumable app with ``ToolRunLedgerPlugin``, killed at each point
  of a tool turn and resumed by that ADK's ``Runner`` from another process, makes
  each side effect at most once (ADK alone makes a finished one twice);
  ``n/a`` on an ADK without resumable apps (``replay_check.py``);
* ``live``: that ADK's real ``Runner.run_live`` over the scripted live model,
  with ``ToolRunLedgerPlugin``: a streaming tool's call keeps its lease while
  the stream runs (then reads ``may_have_run``), a call the model sends again
  while it streams is refused (ADK alone streams it twice), and a plain ``def``
  in ADK's tool thread pool keeps its lease and records its result; ``n/a``
  on an ADK whose live mode runs no plugin tool callback (1.22 to 1.26), where
  live calls must be left unrecorded (``live_check.py``);

and per cell (version x backend x time zone), on one fresh database:

* ``write``: that ADK's real ``Runner`` dies mid-tool in three sessions
  (``write_crash.py``);
* ``repair-ci`` / ``repair-venv``: ``adk-session-heal db upgrade`` and
  ``repair --yes`` heal one session, with the CLI of the project's CI
  environment (newest ADK) and with the one installed beside that ADK. One
  synthetic row is added and every other row stays byte-identical; a second
  repair writes nothing; that ADK's own ``get_session`` reads the heal right
  after its call, and its next turn's model request holds the call followed
  by its response (``read_check.py``);
* ``wrapper``: ``HealingSessionService`` over that ADK's
  ``DatabaseSessionService`` heals the third session in a real ``Runner``
  turn; a second process reading through the wrapper writes nothing
  (``wrapper_check.py``);
* ``incremental``: ``scan --incremental --clock-skew 0s`` of the wrapper's app
  before that turn, and again after it: the second run reads the session the
  turn wrote (dated by that ADK, in its zone's convention) and reports what a
  ``--full-scan`` reports.

Writers, repairs and readers of a cell run under its ``TZ`` (Asia/Tokyo unless
said otherwise: ADK up to 2.6 stores naive local time, 2.7 and later naive
UTC). Prints one table per version and one per cell (pass, or FAIL with the
step and the first line of its error) with times, and exits 1 if anything
failed. Standard library only: it runs under any Python 3.10+.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CLONE = HERE.parent.parent

LINES = ("1.22", "1.27", "1.28", "1", "2.0", "2.6", "2.7", "2")
"""ADK release lines: a ``major.minor`` line, or a major for its newest release."""

KNOWN_NEWEST = {
    "1.22": "1.22.1", "1.27": "1.27.5", "1.28": "1.28.1", "1": "1.39.1",
    "2.0": "2.0.0", "2.6": "2.6.3", "2.7": "2.7.1", "2": "2.13.0",
}
"""What the lines resolved to when last checked; used only when the index does not answer."""

MAIN_TZ = "Asia/Tokyo"
PG_BASE = "postgresql+asyncpg://postgres@127.0.0.1:5432"
MARIADB_BASE = "mysql+aiomysql://root@127.0.0.1:3306"
APPS = {"ci": "matrix_ci", "venv": "matrix_venv", "wrapper": "matrix_wrap"}
STEP_TIMEOUT = 600.0
BUILD_TIMEOUT = 1800.0
VERBOSE = os.environ.get("ADK_MATRIX_VERBOSE") == "1"
DRIVERS = ("sqlalchemy[asyncio]", "aiosqlite", "asyncpg", "aiomysql")
VENV_FORMAT = "1"
"""Bump to rebuild every cached environment (when :func:`venv_spec` changes shape)."""

CELL_CHECKS = ("write", "repair-ci", "repair-venv", "wrapper", "incremental")
VERSION_CHECKS = ("pip", "install", "api", "order", "late", "rerun", "odd", "sorted", "replay",
                  "live")
NOT_APPLICABLE = "n/a"
"""A check's result where that ADK lacks what it checks (no resumable apps: ``replay``; no
plugin tool callbacks in live mode: ``live``)."""


class StepFailed(Exception):
    """A step failed; the message is ``step: first line of the error``."""


# -- versions ------------------------------------------------------------------


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def resolve_versions(lines: Sequence[str]) -> tuple[list[str], str]:
    """Returns the newest release of each line, and where the answer came from."""
    override = os.environ.get("ADK_MATRIX_VERSIONS")
    if override:
        return [v.strip() for v in override.split(",") if v.strip()], "ADK_MATRIX_VERSIONS"
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", "google-adk"],
            capture_output=True, text=True, timeout=120, check=True).stdout
        listed = re.search(r"Available versions: (.+)", out)
        if listed is None:
            raise ValueError("no versions listed")
        available = [v.strip() for v in listed.group(1).split(",")
                     if re.fullmatch(r"\d+(\.\d+)*", v.strip())]
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        print(f"warning: package index not answering ({exc}); "
              "using the versions known when this was written")
        return [KNOWN_NEWEST[line] for line in lines], "known list (index unreachable)"
    chosen = []
    for line in lines:
        prefix = _key(line)
        matching = [v for v in available if _key(v)[:len(prefix)] == prefix]
        if not matching:
            raise SystemExit(f"no google-adk release on line {line}")
        chosen.append(max(matching, key=_key))
    return list(dict.fromkeys(chosen)), "package index"


# -- subprocess helpers ------------------------------------------------------------


def first_error_line(stderr: str, stdout: str = "") -> str:
    """Returns the line that says what went wrong: ours, pip's, the CLI's, or an exception."""
    lines = [re.sub(r" \(/[^)]*\)", "", line.strip())  # no file paths
             for line in stderr.splitlines() if line.strip()]
    out = [line.strip() for line in stdout.splitlines() if line.strip()]
    for i, line in enumerate(out):
        if line.startswith("The conflict is caused by:"):
            return "pip refuses: " + "; ".join(out[i + 1:i + 3])
    for line in lines:
        if line.startswith("FAIL: "):
            return line[len("FAIL: "):]
    pip_errors = [line for line in lines if line.startswith("ERROR: ")]
    if pip_errors:
        return pip_errors[0]
    for line in reversed(lines):
        if line.startswith("Error: ") or re.match(r"^[\w.]+(Error|Exception|Exit)\b", line):
            return line
    if lines:
        return lines[-1]
    return out[-1] if out else "(no output)"


def run_step(step: str, argv: Sequence[str], *, env: dict[str, str] | None = None,
             cwd: Path | None = None, ok_codes: Sequence[int] = (0,),
             timeout: float = STEP_TIMEOUT) -> str:
    """Runs one command; returns its stdout, or raises :class:`StepFailed`."""
    started = time.monotonic()
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=cwd,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise StepFailed(f"{step}: timed out after {timeout:.0f}s") from exc
    if VERBOSE:
        print(f"    {time.monotonic() - started:5.1f}s {step}: "
              f"{' '.join(Path(a).name if a.startswith('/') else a for a in argv[:4])}",
              flush=True)
    if done.returncode not in ok_codes:
        raise StepFailed(f"{step}: {first_error_line(done.stderr, done.stdout)}"
                         f" (exit {done.returncode})")
    return done.stdout


def last_json(step: str, stdout: str) -> Any:
    """Returns the JSON document a driver printed as its last stdout line."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise StepFailed(f"{step}: no result document in its output") from exc


# -- per-version environments --------------------------------------------------------


@dataclass(eq=False)
class Env:
    """One ADK version's cached virtual environment and what this run found in it."""

    version: str
    path: Path
    built: str = ""
    results: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    missing: list[str] | None = None
    """What pip's resolver would add besides this package (``None``: it refused)."""

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    @property
    def cli(self) -> str:
        return str(self.path / "bin" / "adk-session-heal")

    @property
    def usable(self) -> bool:
        """Whether the package is installed, so the cells can run."""
        return self.results.get("install") == "pass"


def venv_spec(version: str) -> list[str]:
    """Returns the requirements an environment is built with: that ADK and its drivers.

    ADK 2.x keeps SQLAlchemy in its ``db`` extra; 1.x depends on it directly.
    """
    adk = f"google-adk[db]=={version}" if _key(version)[0] >= 2 else f"google-adk=={version}"
    return [adk, *DRIVERS]


def _healthy(env: Env, spec: list[str]) -> bool:
    marker = env.path / ".adk-matrix-spec"
    if not marker.is_file() or marker.read_text() != json.dumps([VENV_FORMAT, spec]):
        return False
    probe = ("import importlib.metadata as m, google.adk.runners, sqlalchemy, aiosqlite, "
             f"asyncpg, aiomysql; assert m.version('google-adk') == {env.version!r}")
    return subprocess.run([env.python, "-c", probe], capture_output=True,
                          timeout=300).returncode == 0


def ensure_venv(env: Env) -> None:
    """Reuses the cached environment when healthy, else builds it afresh."""
    spec = venv_spec(env.version)
    if _healthy(env, spec):
        env.built = "cached"
        return
    started = time.monotonic()
    shutil.rmtree(env.path, ignore_errors=True)
    env.path.parent.mkdir(parents=True, exist_ok=True)
    base_python = getattr(sys, "_base_executable", sys.executable)
    run_step("venv", [base_python, "-m", "venv", str(env.path)])
    run_step("venv", [env.python, "-m", "pip", "install", "--quiet", *spec],
             timeout=BUILD_TIMEOUT)
    (env.path / ".adk-matrix-spec").write_text(json.dumps([VENV_FORMAT, spec]))
    env.built = f"built {time.monotonic() - started:.0f}s"


def wheel_requirements(wheel: Path) -> list[str]:
    """Returns the wheel's unconditional requirements (extras left out)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    requirements = []
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            requirement = line.split(":", 1)[1].strip()
            if "extra ==" not in requirement:
                requirements.append(requirement)
    return requirements


def check_resolver(env: Env, wheel: Path) -> None:
    """Does pip's resolver accept this package beside that ADK, without replacing it?"""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        run_step("pip", [env.python, "-m", "pip", "install", "--dry-run",
                         "--report", str(report), str(wheel), f"google-adk=={env.version}"])
        planned = json.loads(report.read_text()).get("install", [])
    pins = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in planned}
    if pins.get("google-adk", env.version) != env.version:
        raise StepFailed(f"pip: would replace google-adk {env.version} with {pins['google-adk']}")
    env.missing = sorted(f"{name}=={version}" for name, version in pins.items()
                         if name != "adk-session-heal")


def install_package(env: Env, wheel: Path) -> None:
    """Installs this checkout's wheel (``--no-deps``) and its missing dependencies.

    When the resolver accepted the package, the dependencies it would add are
    installed as it pinned them; when it refused (a finding, already reported
    by the ``pip`` check), the package's other requirements are resolved
    beside the pinned ADK, so the remaining checks still run. The package
    itself goes in with ``--no-deps``: its own pin never moves that ADK.
    """
    if env.missing is None:
        ours = [r for r in wheel_requirements(wheel) if not r.lower().startswith("google-adk")]
        run_step("install", [env.python, "-m", "pip", "install", "--quiet",
                             f"google-adk=={env.version}", *ours])
    elif env.missing:
        run_step("install", [env.python, "-m", "pip", "install", "--quiet", "--no-deps",
                             *env.missing])
    run_step("install", [env.python, "-m", "pip", "install", "--quiet", "--no-deps",
                         "--force-reinstall", str(wheel)])
    probe = "import importlib.metadata as m; print(m.version('google-adk'))"
    now = run_step("install", [env.python, "-c", probe]).strip()
    if now != env.version:
        raise StepFailed(f"install: google-adk is now {now}, not {env.version}")


def _replay(env: Env) -> str:
    """``replay``: pass, or :data:`NOT_APPLICABLE` on an ADK without resumable apps."""
    printed = last_json("replay", run_step("replay", [env.python, str(HERE / "replay_check.py")]))
    return "pass" if printed.get("resumable") else f"{NOT_APPLICABLE} (no resumable apps)"


def _live(env: Env) -> str:
    """``live``: pass, or :data:`NOT_APPLICABLE` on an ADK whose live mode runs no plugin tool
    callback (where the check still requires that live calls are left unrecorded)."""
    printed = last_json("live", run_step("live", [env.python, str(HERE / "live_check.py")]))
    return ("pass" if printed.get("live_tool_callbacks")
            else f"{NOT_APPLICABLE} (no plugin tool callbacks in live mode: not recorded)")


def prepare(env: Env, wheel: Path) -> None:
    """Builds or reuses the environment, then runs the per-version checks."""
    started = time.monotonic()
    steps: list[tuple[str, Callable[[], object]]] = [
        ("pip", lambda: check_resolver(env, wheel)),
        ("install", lambda: install_package(env, wheel)),
        ("api", lambda: run_step("api", [env.python, str(HERE / "api_check.py")])),
        ("order", lambda: run_step("order", [env.python, str(HERE / "order_check.py")])),
        ("late", lambda: run_step("late", [env.python, str(HERE / "late_check.py")])),
        ("rerun", lambda: run_step("rerun", [env.python, str(HERE / "rerun_check.py")])),
        ("odd", lambda: run_step("odd", [env.python, str(HERE / "odd_check.py")])),
        ("sorted", lambda: run_step("sorted", [env.python, str(HERE / "sorted_check.py")])),
        ("replay", lambda: _replay(env)),
        ("live", lambda: _live(env)),
    ]
    try:
        ensure_venv(env)
    except StepFailed as exc:
        env.built = "FAILED"
        for name, _ in steps:
            env.results[name] = f"FAIL {exc}"
        env.seconds = time.monotonic() - started
        return
    for name, step in steps:
        if name in VERSION_CHECKS[2:] and not env.usable:
            env.results[name] = "skipped (not installed)"
            continue
        try:
            outcome = step()
            # Only ``replay`` and ``live`` say their own result (n/a); the others pass by not
            # failing.
            env.results[name] = str(outcome) if name in ("replay", "live") else "pass"
        except StepFailed as exc:
            env.results[name] = f"FAIL {exc}"
    env.seconds = time.monotonic() - started


# -- databases -------------------------------------------------------------------


@dataclass
class Database:
    """A database of its own for one cell."""

    backend: str
    url: str
    drop: Callable[[], None]


def create_database(backend: str, scratch: Path) -> Database:
    """Creates a fresh database on the backend and returns how to reach and drop it."""
    if backend == "sqlite":
        path = scratch / "sessions.db"
        return Database(backend, f"sqlite+aiosqlite:///{path}", lambda: None)
    name = f"adk_matrix_{uuid.uuid4().hex[:12]}"
    if backend == "postgres":
        admin = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-q",
                 "-v", "ON_ERROR_STOP=1", "-c"]
        base = PG_BASE
    else:
        admin = ["mysql", "-h", "127.0.0.1", "-u", "root", "-e"]
        base = MARIADB_BASE
    run_step("create database", [*admin, f"CREATE DATABASE {name}"])

    def drop() -> None:
        subprocess.run([*admin, f"DROP DATABASE IF EXISTS {name}"], capture_output=True,
                       timeout=120)

    return Database(backend, f"{base}/{name}", drop)


# -- cells -------------------------------------------------------------------------


@dataclass
class Cell:
    """One version x backend x time zone, and its results."""

    env: Env
    backend: str
    tz: str
    results: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.env.version}/{self.backend}/{self.tz}"


def _rows(dump: dict[str, Any]) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True) for r in dump["rows"])


class CellRun:
    """Runs one cell's steps on its database."""

    def __init__(self, cell: Cell, db: Database, scratch: Path, ci_cli: str) -> None:
        self.cell = cell
        self.db = db
        self.scratch = scratch
        self.ci_cli = ci_cli
        self.env = dict(os.environ, TZ=cell.tz)
        self.env.pop("PYTHONPATH", None)
        self.crashed: dict[str, Any] = {}
        self._dumps = 0
        self._current: dict[str, Any] | None = None

    def driver(self, step: str, script: str, *args: str,
               ok_codes: Sequence[int] = (0,)) -> str:
        return run_step(step, [self.cell.env.python, str(HERE / script), *args],
                        env=self.env, cwd=self.scratch, ok_codes=ok_codes)

    def dump(self, step: str) -> dict[str, Any]:
        self._dumps += 1
        out = self.scratch / f"dump-{self._dumps}.json"
        self.driver(f"{step}: dump", "matrix_dump.py", self.db.url, str(out))
        document: dict[str, Any] = json.loads(out.read_text())
        return document

    def write(self) -> None:
        result = last_json("write", self.driver("write", "write_crash.py", self.db.url,
                                                *APPS.values()))
        self.crashed = result["apps"]

    def repair(self, which: str, cli: str) -> None:
        """db upgrade, repair, second repair; checks the rows and the JSON reports."""
        app_name = APPS[which]
        heal_id = f"{self.crashed[app_name]['call_event_id']}-heal"
        before, self._current = self._current or self.dump("dump before"), None
        if which == "ci":  # the ledger's tables; the other CLI then finds them at head
            run_step("db upgrade", [cli, "db", "upgrade", self.db.url], env=self.env,
                     cwd=self.scratch)
        repair = [cli, "repair", self.db.url, "--app", app_name, "--older-than", "0s",
                  "--clock-skew", "0s", "--yes", "--json"]
        report = json.loads(run_step("repair", repair, env=self.env, cwd=self.scratch))
        written = [h.get("synthetic_event_id") for h in report.get("heals", [])]
        if report.get("healed") != 1 or written != [heal_id]:
            raise StepFailed(f"repair: healed {report.get('healed')} events, expected 1 "
                             f"({written}, expected [{heal_id!r}])")
        after = self.dump("dump after")
        removed = _rows(before) - _rows(after)
        added = _rows(after) - _rows(before)
        if removed:
            first = json.loads(next(iter(removed)))
            raise StepFailed(f"repair: changed or removed {sum(removed.values())} existing "
                             f"rows, first in {first['table']} {first['key']}")
        added_rows = [json.loads(r) for r in added.elements()]
        if [(r["table"], r["key"].get("id")) for r in added_rows] != [("events", heal_id)]:
            shown = [(r["table"], r["key"]) for r in added_rows]
            raise StepFailed(f"repair: added {shown}, expected only events row {heal_id}")
        again = json.loads(run_step("second repair", repair, env=self.env, cwd=self.scratch))
        if again.get("healed") != 0 or again.get("heals"):
            planned = [f"{h.get('synthetic_event_id')} ({h.get('reason')})"
                       for h in again.get("heals") or []]
            raise StepFailed(f"second repair: healed {again.get('healed')}, expected nothing; "
                             f"planned {planned}")
        final = self.dump("dump after second repair")
        if _rows(final) != _rows(after):
            raise StepFailed("second repair: changed the ADK tables")
        self._current = final

    def read(self, which: Sequence[str]) -> dict[str, str]:
        apps = [APPS[w] for w in which]
        result = last_json("read", self.driver("read", "read_check.py", self.db.url, *apps))
        return {w: result["apps"][APPS[w]] for w in which}

    def scan(self, step: str, *flags: str) -> dict[str, Any]:
        """The CI CLI's scan of the wrapper's app, as JSON (exit 0 or 1 both fine)."""
        argv = [self.ci_cli, "scan", self.db.url, "--app", APPS["wrapper"], "--clock-skew",
                "0s", "--json", *flags]
        document: dict[str, Any] = json.loads(run_step(step, argv, env=self.env,
                                                       cwd=self.scratch, ok_codes=(0, 1)))
        return document

    def incremental(self) -> None:
        """After the wrapper's turn: the incremental run read its session, found what all did."""
        inc = self.scan("incremental scan", "--incremental")
        full = self.scan("full scan", "--full-scan")
        if inc.get("sessions_scanned") != 1:
            raise StepFailed(f"incremental scan: read {inc.get('sessions_scanned')} sessions, "
                             "expected the 1 the wrapper's turn wrote")
        run_only = ("sessions_scanned", "events_scanned", "since", "incremental", "scanned_at")
        if ({k: v for k, v in inc.items() if k not in run_only}
                != {k: v for k, v in full.items() if k not in run_only}):
            raise StepFailed("incremental scan: reported other findings than --full-scan")

    def wrapper(self) -> None:
        app_name = APPS["wrapper"]
        self.driver("wrapper turn", "wrapper_check.py", "turn", self.db.url, app_name)
        self.driver("second reader", "wrapper_check.py", "reread", self.db.url, app_name)


def run_cell(cell: Cell, ci_cli: str, keep: bool) -> None:
    """Runs one cell on a database of its own; records pass or FAIL per check."""
    started = time.monotonic()
    results = cell.results
    scratch = Path(tempfile.mkdtemp(prefix="adk-matrix-"))
    db: Database | None = None
    try:
        if not cell.env.usable:
            for check in CELL_CHECKS:
                results[check] = "skipped (package not installed)"
            return
        db = create_database(cell.backend, scratch)
        run = CellRun(cell, db, scratch, ci_cli)
        try:
            run.write()
            results["write"] = "pass"
        except StepFailed as exc:
            results["write"] = f"FAIL {exc}"
            for check in CELL_CHECKS[1:]:
                results[check] = "skipped (no crashed sessions)"
            return
        repaired = []
        for which, cli in (("ci", ci_cli), ("venv", cell.env.cli)):
            try:
                run.repair(which, cli)
                repaired.append(which)
            except StepFailed as exc:
                results[f"repair-{which}"] = f"FAIL {exc}"
        if repaired:
            try:
                for which, outcome in run.read(repaired).items():
                    results[f"repair-{which}"] = (
                        "pass" if outcome == "ok" else f"FAIL read: {outcome}")
            except StepFailed as exc:
                for which in repaired:
                    results[f"repair-{which}"] = f"FAIL {exc}"
        first_run: str | None = None
        if "ci" in repaired:  # its db upgrade made the ledger's tables
            try:
                run.scan("first incremental scan", "--incremental")
            except StepFailed as exc:
                first_run = f"FAIL {exc}"
        else:
            first_run = "skipped (no ledger)"
        try:
            run.wrapper()
            results["wrapper"] = "pass"
        except StepFailed as exc:
            results["wrapper"] = f"FAIL {exc}"
            first_run = first_run or "skipped (the wrapper's turn failed)"
        if first_run is not None:
            results["incremental"] = first_run
        else:
            try:
                run.incremental()
                results["incremental"] = "pass"
            except StepFailed as exc:
                results["incremental"] = f"FAIL {exc}"
    except StepFailed as exc:
        for check in CELL_CHECKS:
            results.setdefault(check, f"FAIL {exc}")
    finally:
        cell.seconds = time.monotonic() - started
        if db is not None and keep and any(r.startswith("FAIL") for r in results.values()):
            print(f"kept {cell.name}: {db.url}", flush=True)
        else:
            if db is not None:
                db.drop()
            shutil.rmtree(scratch, ignore_errors=True)


def plan_cells(envs: Sequence[Env], backends: Sequence[str]) -> list[Cell]:
    """Every version on SQLite and PostgreSQL, MariaDB on the oldest and newest, two more zones.

    Under Asia/Tokyo (ahead of UTC). America/Los_Angeles (behind UTC) runs on
    the newest release that stores local time (2.6) and UTC on the oldest.
    """
    cells = []  # the odd ones first, so that no slow cell starts last
    if "mariadb" in backends and envs:
        for env in dict.fromkeys((envs[0], envs[-1])):
            cells.append(Cell(env, "mariadb", MAIN_TZ))
    local_time = [e for e in envs if _key(e.version) < (2, 7)]
    if local_time and "postgres" in backends:
        cells.append(Cell(local_time[-1], "postgres", "America/Los_Angeles"))
    if envs and "sqlite" in backends:
        cells.append(Cell(envs[0], "sqlite", "UTC"))
    for env in envs:
        for backend in ("sqlite", "postgres"):
            if backend in backends:
                cells.append(Cell(env, backend, MAIN_TZ))
    return cells


# -- report ------------------------------------------------------------------------


def _short(result: str) -> str:
    if result.startswith(NOT_APPLICABLE):
        return NOT_APPLICABLE
    return "pass" if result == "pass" else ("FAIL" if result.startswith("FAIL") else "skip")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip()
             for row in (header, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(envs: Sequence[Env], cells: Sequence[Cell], total: float, source: str) -> bool:
    """Prints the tables and every failure's line; returns whether everything passed."""
    print(f"\nADK versions ({source}):")
    print(_table(("version", "venv", *VERSION_CHECKS, "seconds"),
                 [(e.version, e.built, *(_short(e.results.get(c, "")) for c in VERSION_CHECKS),
                   f"{e.seconds:.0f}") for e in envs]))
    print("\nCells:")
    print(_table(("version", "backend", "TZ", *VERSION_CHECKS, *CELL_CHECKS, "seconds"),
                 [(c.env.version, c.backend, c.tz,
                   *(_short(c.env.results.get(k, "")) for k in VERSION_CHECKS),
                   *(_short(c.results.get(k, "")) for k in CELL_CHECKS), f"{c.seconds:.0f}")
                  for c in cells]))
    problems = [(e.version, check, r) for e in envs for check, r in e.results.items()
                if not r.startswith("pass")]
    problems += [(c.name, check, r) for c in cells for check, r in c.results.items()
                 if not r.startswith("pass")]
    if problems:
        print("\nNot passed:")
        for where, check, result in problems:
            print(f"  {where} {check}: {result}")
    failed = any(r.startswith("FAIL") for _, _, r in problems)
    passed = sum(r == "pass" for e in envs for r in e.results.values())
    passed += sum(r == "pass" for c in cells for r in c.results.values())
    failures = sum(r.startswith("FAIL") for _, _, r in problems)
    print(f"\nADK reader matrix: {len(envs)} versions, {len(cells)} cells, "
          f"total {total:.0f}s")
    print(f"matrix: {passed} passed, {failures} failed")
    return not failed


# -- main ------------------------------------------------------------------------


@contextlib.contextmanager
def cache_lock(venvs: Path) -> Iterator[None]:
    """Holds the cache's lock: one matrix run at a time installs into and runs its environments."""
    venvs.mkdir(parents=True, exist_ok=True)
    with open(venvs / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another matrix run to release {venvs / '.lock'}", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def prune(venvs: Path, keep: Sequence[str]) -> None:
    """Removes cached environments of versions no longer in the matrix (built by it)."""
    for path in sorted(venvs.iterdir()):
        if path.name not in keep and (path / ".adk-matrix-spec").is_file():
            print(f"removing the environment of google-adk {path.name} (no longer tested)")
            shutil.rmtree(path, ignore_errors=True)


def build_wheel(scratch: Path) -> Path:
    """Builds this checkout's wheel once for every environment."""
    run_step("wheel", [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                       "--wheel-dir", str(scratch), str(CLONE)])
    return next(scratch.glob("adk_session_heal-*.whl"))


def default_ci_cli() -> str:
    """The CLI of the environment running this script, else the checkout's ``.venv``."""
    beside = Path(sys.executable).parent / "adk-session-heal"
    if beside.exists():
        return str(beside)
    found = shutil.which("adk-session-heal")
    if found:
        return found
    return str(CLONE / ".venv" / "bin" / "adk-session-heal")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2,
                        help="cells run at once (default: the number of cores)")
    parser.add_argument("--backends", default="sqlite,postgres,mariadb",
                        help="comma-separated subset of sqlite,postgres,mariadb")
    parser.add_argument("--ci-cli", default=None,
                        help="the project's own adk-session-heal (default: the one beside "
                             "this Python, else on PATH)")
    parser.add_argument("--only", default="",
                        help="run only the cells whose name (version/backend/TZ) contains this")
    parser.add_argument("--keep", action="store_true",
                        help="keep the databases of failed cells and print their URLs")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the matrix; returns the exit code."""
    args = parse_args(argv)
    started = time.monotonic()
    cache = Path(os.environ.get("ADK_SESSION_HEAL_CACHE")
                 or Path.home() / ".cache" / "adk-session-heal")
    ci_cli = args.ci_cli or default_ci_cli()
    versions, source = resolve_versions(LINES)
    venvs = cache / "adk-venvs"
    print(f"ADK versions: {', '.join(versions)} ({source}); environments in "
          f"{venvs}; CI's CLI: {ci_cli}", flush=True)
    with cache_lock(venvs):
        if source == "package index":
            prune(venvs, versions)
        return run_matrix(args, venvs, versions, source, ci_cli, started)


def run_matrix(args: argparse.Namespace, venvs: Path, versions: Sequence[str], source: str,
               ci_cli: str, started: float) -> int:
    """Prepares each version's environment, runs the cells, prints the report."""
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    envs = [Env(v, venvs / v) for v in versions]
    with tempfile.TemporaryDirectory(prefix="adk-matrix-wheel-") as scratch:
        wheel = build_wheel(Path(scratch))
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for future in [pool.submit(prepare, env, wheel) for env in envs]:
                future.result()
        for env in envs:
            print(f"  {env.version}: {env.built}; "
                  + ", ".join(f"{k} {_short(v)}" for k, v in env.results.items())
                  + f" ({env.seconds:.0f}s)", flush=True)
    cells = [c for c in plan_cells(envs, backends) if args.only in c.name]
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = {pool.submit(run_cell, cell, ci_cli, args.keep): cell for cell in cells}
        for future in concurrent.futures.as_completed(futures):
            future.result()
            cell = futures[future]
            print(f"  {cell.name}: "
                  + ", ".join(f"{k} {_short(v)}" for k, v in cell.results.items())
                  + f" ({cell.seconds:.0f}s)", flush=True)
    return 0 if report(envs, cells, time.monotonic() - started, source) else 1


if __name__ == "__main__":
    sys.exit(main())
