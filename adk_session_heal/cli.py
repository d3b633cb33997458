"""The ``adk-session-heal`` command line: thin click commands over the library.

Each command parses its options, calls :mod:`adk_session_heal.repair`,
:mod:`adk_session_heal.ledger` or :mod:`adk_session_heal.migrate`, and prints
(rich tables, or with ``--json`` the documents described in
:mod:`adk_session_heal.scan_report` and, for the ``db`` commands,
:mod:`adk_session_heal.migration_report`). Library errors become one line on
stderr and exit code 2.

Exit codes of ``scan`` and ``repair``: 0 nothing to do, or done; 1 (``scan``)
something needs healing, which wins over 3; 2 bad input or environment (one
line on stderr: what was wrong, what to do); 3 done, but rows were skipped:
sessions with damaged rows, or (``repair``) sessions that changed or were
deleted between the scan and the write. A progress bar is shown only when both
stdout and stderr are terminals, and never with ``--json``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import re
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import migrate
from .bulk import RepairPlan, apply_plan, check_repairable, plan_repair, scan
from .errors import HealError
from .ledger import SqlHealLedger
from .migration_report import current_json, migration_json
from .migration_report import history_json as db_history_json
from .policy import HealPolicy
from .scan_report import CallEntry, RepairReport, ScanReport, history_json
from .store import SessionFilter, open_store
from .store.urls import StoreUrl, parse_store_url

__all__ = ["main", "parse_duration"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
EXIT_NEEDS_HEALING = 1
"""``scan``: at least one dead call."""
EXIT_SKIPPED = 3
"""``scan`` / ``repair``: done, but damaged or moved sessions were skipped."""


class CliError(click.ClickException):
    """A library error, shown as one line, exit code 2."""

    exit_code = 2


def parse_duration(text: str) -> float:
    """Parses ``90``, ``90s``, ``30m``, ``24h``, ``7d``, ``1w`` or ``1h30m`` into seconds.

    Raises:
        ValueError: The text is not a duration.
    """
    compact = text.strip().lower().replace(" ", "")
    matches = list(_DURATION.finditer(compact))
    if not compact or "".join(m.group(0) for m in matches) != compact:
        raise ValueError(f"{text!r} is not a duration (examples: 90s, 30m, 24h, 7d)")
    return sum(float(m.group(1)) * _UNITS[m.group(2)] for m in matches)


def _duration(_ctx: click.Context, _param: click.Parameter, value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    try:
        return asyncio.run(coroutine)
    except HealError as exc:
        raise CliError(str(exc)) from exc


def _filters(command: F) -> F:
    for option in reversed((
        click.option("--app", "app_name", help="Only this app's sessions."),
        click.option("--user", "user_id", help="Only this user's sessions."),
        click.option("--session", "session_id", help="Only this session."),
    )):
        command = option(command)
    return command


def _older_than(command: F) -> F:
    command = click.option(
        "--clock-skew",
        default="5m",
        show_default=True,
        callback=_duration,
        help="Clock difference tolerated between the hosts that wrote the sessions and this "
        "one; added to --older-than. 0s only when they share this host's clock.",
    )(command)
    return click.option(
        "--older-than",
        default="24h",
        show_default=True,
        callback=_duration,
        help="Calls of a session's newest invocation count as dead (stale) once older than "
        "this plus --clock-skew (by their stored time). Calls superseded by a later "
        "invocation are dead at any age.",
    )(command)


def _timeout(command: F) -> F:
    return click.option(
        "--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
        help="How long to wait for a database server, to connect and for each statement "
        "[default: 10 to connect, 60 per statement].",
    )(command)


def _json_flag(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON (stable format 1).")(
        command
    )


class _Bar:
    """A rich progress bar as a :class:`~adk_session_heal.repair.ScanProgress`."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task = progress.add_task("scanning sessions", total=None)

    def start(self, total_sessions: int) -> None:
        self._progress.update(self._task, total=total_sessions)

    def advance(self, sessions: int) -> None:
        self._progress.advance(self._task, sessions)


def _progress(as_json: bool) -> Progress | None:
    if as_json or not (sys.stdout.isatty() and sys.stderr.isatty()):
        return None
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), transient=True,
    )


async def _with_progress(
    as_json: bool, work: Callable[[_Bar | None], Coroutine[Any, Any, T]]
) -> T:
    progress = _progress(as_json)
    if progress is None:
        return await work(None)
    with progress:
        return await work(_Bar(progress))


def _console() -> Console:
    """Returns a console that prints stored text literally (no markup, no highlighting)."""
    return Console(markup=False, highlight=False)


def _print_json(document: dict[str, Any]) -> None:
    click.echo(json.dumps(document, indent=2))


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def _calls_table(title: str, entries: list[CallEntry], now: float) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("session (app/user/id)", "call id", "tool", "invocation", "age", "status"):
        table.add_column(column)
    for e in entries:
        status = e.status + (f" ({e.pending_reason})" if e.pending_reason else "")
        table.add_row(f"{e.app_name}/{e.user_id}/{e.session_id}", e.call_id or "(none)",
                      e.tool_name, e.invocation_id, _age(now - e.timestamp), status)
    return table


def _print_scan(console: Console, report: ScanReport) -> None:
    console.print(
        f"Scanned {report.sessions_scanned} sessions ({report.events_scanned} events) "
        f"in {report.url} ({report.layout} layout)"
    )
    console.print(
        f"Sessions needing healing: {report.sessions_needing_healing}; "
        f"dead calls: {len(report.dead_calls)}"
    )
    now = report.scanned_at
    if report.dead_calls:
        console.print(_calls_table("Dead calls (healed by repair)", report.dead_calls, now))
    if report.pending_calls:
        console.print(_calls_table("Pending calls (never healed)", report.pending_calls, now))
    if report.id_less_calls:
        console.print(_calls_table("Calls without an id (never healed)", report.id_less_calls, now))
    if report.orphaned_responses:
        table = Table(title="Orphaned responses (never healed)", title_justify="left")
        for column in ("session (app/user/id)", "event", "call id", "tool"):
            table.add_column(column)
        for r in report.orphaned_responses:
            table.add_row(f"{r.app_name}/{r.user_id}/{r.session_id}", r.event_id,
                          r.call_id or "(none)", r.tool_name)
        console.print(table)
    if report.damaged_rows:
        table = Table(title=f"Damaged rows: {report.damaged_sessions} sessions skipped whole "
                      "(never healed)", title_justify="left")
        for column in ("session (app/user/id)", "event", "problem"):
            table.add_column(column)
        for d in report.damaged_rows:
            table.add_row(f"{d.app_name}/{d.user_id}/{d.session_id}", d.event_id or "(unknown)",
                          d.problem)
        console.print(table)


def _print_repair(console: Console, report: RepairReport, *, preview: bool = False) -> None:
    _print_scan(console, report.scan)
    if report.heals:
        table = Table(title="Synthetic responses", title_justify="left")
        for column in ("session (app/user/id)", "call event", "synthetic event", "calls",
                       "reason", "result"):
            table.add_column(column)
        for heal in report.heals:
            r = heal.record
            result = {None: "would write", True: "written", False: "already present"}
            shown = (heal.outcome.value.replace("_", " ")
                     if heal.outcome is not None and not heal.written else result[heal.written])
            table.add_row(f"{r.app_name}/{r.user_id}/{r.session_id}", r.call_event_id,
                          r.synthetic_event_id,
                          ", ".join(f"{n}({i})" for i, n in zip(r.call_ids, r.tool_names,
                                                                 strict=True)),
                          r.reason, shown)
        console.print(table)
    if preview:
        return
    if report.dry_run:
        for heal in report.heals:
            console.print(f"would insert event {heal.record.synthetic_event_id!r} into session "
                          f"{heal.record.app_name}/{heal.record.user_id}/"
                          f"{heal.record.session_id}:")
            console.print_json(data=heal.event_data)
        console.print(f"Dry run: synthetic events that would be written: {len(report.heals)}; "
                      "nothing was written.")
    else:
        ledger = "recorded in the heal ledger" if report.ledger else "not recorded (--no-ledger)"
        skipped = (f", {report.skipped} skipped: their session changed since the scan"
                   if report.skipped else "")
        if report.scan.damaged_sessions:
            skipped += (f"; {report.scan.damaged_sessions} sessions with damaged rows "
                        "skipped whole")
        console.print(f"Synthetic events written: {report.healed} "
                      f"({report.already_present} already present{skipped}); {ledger}.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="adk-session-heal")
def main() -> None:
    """Find and heal ADK sessions left with unanswered tool calls.

    URL is an ADK session database, as ADK takes it: sqlite:///.adk/session.db
    (ADK's SqliteSessionService), sqlite+aiosqlite:///sessions.db,
    postgresql+asyncpg://user:pass@host/db, mysql+aiomysql://user:pass@host/db.
    """
    # A repair run also logs on the package logger (a summary line, each heal at
    # DEBUG), for services that collect logs; the CLI prints its own table, so
    # without a configured handler those records must not fall through to
    # Python's last-resort stderr handler.
    heal_logger = logging.getLogger("adk_session_heal")
    if not heal_logger.handlers:
        heal_logger.addHandler(logging.NullHandler())


@main.command("scan")
@click.argument("url")
@_filters
@_older_than
@_timeout
@_json_flag
def scan_command(url: str, app_name: str | None, user_id: str | None, session_id: str | None,
                 older_than: float, clock_skew: float, timeout: float | None,
                 as_json: bool) -> None:
    """Report dead tool calls, read-only.

    Exit 0: nothing to heal; 1: something needs healing (wins over 3); 2: bad
    input or environment (one line on stderr); 3: nothing to heal, but sessions
    with damaged rows were skipped (listed with their event ids).

    Example: adk-session-heal scan sqlite:///.adk/session.db --older-than 1h
    """
    where = SessionFilter(app_name, user_id, session_id)
    report = _run(_with_progress(
        as_json, lambda bar: scan(url, where=where, stale_after=older_than,
                                  clock_skew=clock_skew, progress=bar, timeout=timeout)))
    if as_json:
        _print_json(report.to_json())
    else:
        _print_scan(_console(), report)
        if report.needs_healing:
            _console().print("Run `adk-session-heal repair URL` to heal them "
                            "(--dry-run shows what it would write).")
    sys.exit(EXIT_NEEDS_HEALING if report.needs_healing
             else EXIT_SKIPPED if report.damaged_rows else 0)


@main.command("repair")
@click.argument("url")
@_filters
@_older_than
@click.option("--dry-run", is_flag=True, help="Print exactly what would be written; write nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--no-ledger", is_flag=True, help="Do not record heals in the heal ledger.")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1),
              help="Synthetic events per transaction.")
@_timeout
@_json_flag
def repair_command(url: str, app_name: str | None, user_id: str | None, session_id: str | None,
                   older_than: float, clock_skew: float, dry_run: bool, yes: bool,
                   no_ledger: bool, batch_size: int, timeout: float | None,
                   as_json: bool) -> None:
    """Heal dead tool calls: one synthetic error response per dead call event.

    Idempotent and safe to interrupt: a rerun finishes the job and heals nothing
    twice. Only inserts rows; never updates sessions.update_time.

    Exit 0: done (or nothing to do); 2: bad input or environment (one line on
    stderr); 3: done, but something was skipped: sessions with damaged rows, or
    sessions that changed or were deleted since the scan.

    Example: adk-session-heal db upgrade URL && adk-session-heal repair URL --yes
    """
    where = SessionFilter(app_name, user_id, session_id)
    policy = HealPolicy(stale_after=older_than, clock_skew=clock_skew)
    if not dry_run and not yes and not sys.stdin.isatty():
        raise CliError("repair writes to the database: pass --yes to confirm "
                       "(or --dry-run to see what it would write)")
    if not dry_run:
        _run(check_repairable(url, ledger=not no_ledger, timeout=timeout))
    plan: RepairPlan = _run(_with_progress(as_json, lambda bar: plan_repair(
        url, where=where, policy=policy, progress=bar, timeout=timeout)))
    if dry_run:
        report = RepairReport.dry(plan.scan, plan.heals)
    else:
        if not yes:
            if not plan.heals:
                _print_scan(_console(), plan.scan)
                _console().print("Nothing to heal.")
                sys.exit(EXIT_SKIPPED if plan.scan.damaged_rows else 0)
            _print_repair(_console(), RepairReport.dry(plan.scan, plan.heals), preview=True)
            click.confirm(f"Write these {len(plan.heals)} synthetic events into {plan.url}?",
                          abort=True)
        report = _run(apply_plan(plan, ledger=not no_ledger, batch_size=batch_size,
                                 timeout=timeout))
    if as_json:
        _print_json(report.to_json())
    else:
        _print_repair(_console(), report)
    sys.exit(EXIT_SKIPPED if report.skipped or report.scan.damaged_rows else 0)


@main.command("history")
@click.argument("url")
@_filters
@_timeout
@_json_flag
def history_command(url: str, app_name: str | None, user_id: str | None,
                    session_id: str | None, timeout: float | None, as_json: bool) -> None:
    """Show what was healed, when and why (from the heal ledger).

    Example: adk-session-heal history postgresql+asyncpg://app@db/sessions --json
    """

    async def read() -> tuple[str, list[Any]]:
        store = await open_store(url, timeout=timeout)
        await store.close()
        assert store.url is not None
        ledger = SqlHealLedger.from_url(store.url, timeout=timeout)
        try:
            return str(store.url), await ledger.history(
                app_name=app_name, user_id=user_id, session_id=session_id)
        finally:
            await ledger.close()

    shown_url, records = _run(read())
    if as_json:
        _print_json(history_json(shown_url, records))
        return
    table = Table(title=f"Heals recorded in {shown_url}", title_justify="left")
    for column in ("healed at (UTC)", "session (app/user/id)", "synthetic event", "tools",
                   "reason", "trigger"):
        table.add_column(column)
    for r in records:
        when = datetime.fromtimestamp(r.healed_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(when, f"{r.app_name}/{r.user_id}/{r.session_id}", r.synthetic_event_id,
                      ", ".join(r.tool_names), r.reason, r.trigger.value)
    console = _console()
    console.print(table)
    console.print(f"Heals recorded: {len(records)}")


@main.group("db")
def db_group() -> None:
    """Manage adk-session-heal's own tables (the heal ledger) in a session database.

    Only our tables change: adk_session_heal_ledger (one row per heal written)
    and the version table adk_session_heal_alembic_version. ADK's tables, and
    the synthetic events already written into sessions, are never touched.
    --sql prints the SQL for the URL's engine (SQLite, PostgreSQL, MySQL or
    MariaDB) without connecting, for review before it runs.
    """


def _store_url(url: str) -> StoreUrl:
    """Parses a URL for the db commands (a bad one: one line, exit 2)."""
    try:
        return parse_store_url(url)
    except HealError as exc:
        raise CliError(str(exc)) from exc


def _sql_script(url: StoreUrl, action: Literal["upgrade", "downgrade"],
                revision: str) -> tuple[str, str | None]:
    """Returns the offline SQL and the revision it leaves the database at."""
    try:
        script = migrate.sql_script(url, action, revision)
        return script, migrate.resolve_revision(revision.rpartition(":")[2])
    except HealError as exc:
        raise CliError(str(exc)) from exc


def _sql_flag(command: F) -> F:
    return click.option(
        "--sql", "sql_only", is_flag=True,
        help="Print the SQL for the URL's database engine instead of running it; connects "
        "to nothing, writes nothing.",
    )(command)


def _print_migration(command: Literal["db upgrade", "db downgrade"], url: StoreUrl,
                     target: str, revision: str | None, sql: str | None,
                     as_json: bool) -> None:
    head = migrate.head_revision()
    if as_json:
        _print_json(migration_json(command, url, target=target, revision=revision, head=head,
                                   sql=sql))
    elif sql is not None:
        click.echo(sql, nl=False)
    else:
        click.echo(f"heal ledger at revision {revision or 'none'} (head {head})")


@db_group.command("upgrade")
@click.argument("url")
@click.option("--revision", default="head", show_default=True,
              help="Target revision (with --sql also FROM:TO, e.g. 0001:head).")
@_sql_flag
@_timeout
@_json_flag
def db_upgrade(url: str, revision: str, sql_only: bool, timeout: float | None,
               as_json: bool) -> None:
    """Create or upgrade the heal ledger (Alembic, own version table).

    With --sql, the SQL from an empty database (no heal ledger) to --revision.

    Example: adk-session-heal db upgrade sqlite:///.adk/session.db --sql
    """
    store_url = _store_url(url)
    if sql_only:
        sql, now = _sql_script(store_url, "upgrade", revision)
    else:
        sql, now = None, _run(migrate.upgrade(store_url, revision, timeout=timeout))
    _print_migration("db upgrade", store_url, revision, now, sql, as_json)


@db_group.command("downgrade")
@click.argument("url")
@click.argument("revision")
@_sql_flag
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@_timeout
@_json_flag
def db_downgrade(url: str, revision: str, sql_only: bool, yes: bool, timeout: float | None,
                 as_json: bool) -> None:
    """Downgrade the heal ledger to REVISION; "base" drops our two tables.

    Only our tables change: base drops adk_session_heal_ledger (the record of
    past heals, lost) and the version table adk_session_heal_alembic_version.
    The synthetic events already written into sessions stay, and `repair`
    never heals a call twice (their ids are deterministic); `db upgrade`
    recreates an empty ledger.

    With --sql, the SQL from the newest revision down to REVISION (or FROM:TO).

    Example: adk-session-heal db downgrade sqlite:///.adk/session.db base --sql
    """
    store_url = _store_url(url)
    if sql_only:
        sql, now = _sql_script(store_url, "downgrade", revision)
        _print_migration("db downgrade", store_url, revision, now, sql, as_json)
        return
    try:
        target = migrate.resolve_revision(revision)
    except HealError as exc:
        raise CliError(str(exc)) from exc
    if not yes:
        if not sys.stdin.isatty():
            raise CliError("db downgrade drops heal ledger tables and their records: pass "
                           "--yes to confirm (or --sql to see the SQL)")
        click.confirm(f"Downgrade the heal ledger in {store_url} to revision "
                      f"{target or 'base'} (dropping what later revisions hold)?", abort=True)
    now = _run(migrate.downgrade(store_url, revision, timeout=timeout))
    _print_migration("db downgrade", store_url, revision, now, None, as_json)


@db_group.command("current")
@click.argument("url")
@_timeout
@_json_flag
def db_current(url: str, timeout: float | None, as_json: bool) -> None:
    """Print the heal ledger's revision ("none" when not installed). Read-only.

    Example: adk-session-heal db current sqlite:///.adk/session.db --json
    """
    store_url = _store_url(url)
    now = _run(migrate.current(store_url, timeout=timeout))
    head = migrate.head_revision()
    if as_json:
        _print_json(current_json(store_url, revision=now, head=head))
    else:
        click.echo(f"heal ledger at revision {now or 'none'} (head {head})")


@db_group.command("history")
@click.argument("url", required=False)
@_timeout
@_json_flag
def db_history(url: str | None, timeout: float | None, as_json: bool) -> None:
    """List the heal ledger's migrations, newest first; with URL, mark the current one.

    Needs no database without URL; with it, read-only.

    Example: adk-session-heal db history sqlite:///.adk/session.db
    """
    store_url = _store_url(url) if url is not None else None
    now = _run(migrate.current(store_url, timeout=timeout)) if store_url is not None else None
    found = migrate.revisions()
    if as_json:
        _print_json(db_history_json(found, url=store_url, current=now))
        return
    for rev in found:
        marks = "".join((" (head)" if rev.head else "",
                         " (current)" if store_url is not None and rev.id == now else ""))
        click.echo(f"{rev.down_revision or '<base>'} -> {rev.id}{marks}, {rev.message}")
    if store_url is not None and now is None:
        click.echo(f"no heal ledger in {store_url} (current: base)")


@main.command("demo")
def demo_command() -> None:
    """Crash a real ADK run mid-tool on embedded SQLite, then heal it."""
    demo = importlib.import_module("adk_session_heal.demo")
    sys.exit(asyncio.run(demo.run_demo(Console())))

