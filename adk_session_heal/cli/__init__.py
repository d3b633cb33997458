"""The ``adk-session-heal`` command line (private module; the commands are the interface).

Each command parses its options, calls :mod:`adk_session_heal.ops.bulk`,
:mod:`adk_session_heal.ledger` or :mod:`adk_session_heal.migrate`, and prints
what :mod:`adk_session_heal.ops.scan_report` builds (and, for the ``db`` commands,
:mod:`adk_session_heal.ops.migration_report`).

URL: every command that takes one reads ``ADK_SESSION_HEAL_URL`` when it is
omitted (an argument given wins).

Output (``scan``, ``repair``, ``history``): ``--format table`` (the default on
a terminal: rich tables, long ids folded, never cut), ``tsv`` (the default when
stdout is not a terminal: a header line, then one record per line, nothing
truncated, no colour), ``json`` (one document; ``--json`` is short for it) or
``jsonl`` (one record per line, then a summary line). The documents, records
and columns are described in :mod:`adk_session_heal.ops.scan_report`; each carries
``"version": 1``. Stdout holds only that output: with ``tsv``, ``json`` and
``jsonl`` the summary line and hints go to stderr; prompts, progress bars and
logs always do. A
progress bar is shown only for ``--format table`` with stdout and stderr both
terminals.

Exit codes: 0 nothing to do, or done; 1 (``scan``) something needs healing,
which wins over 3; 2 bad input or environment (one line on stderr: what was
wrong, what to do; ``--debug`` adds the traceback); 3 done, but rows were
skipped: sessions with damaged rows, or (``repair``) sessions that changed or
were deleted between the scan and the write. Declining ``repair``'s
confirmation exits 1 ("Aborted!"), Ctrl-C 130. Errors are turned into exit
codes in one place, :meth:`_Cli.invoke`.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import itertools
import json
import logging
import re
import shlex
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import click

from ..errors import HealError, LedgerError
from ..ops.json_version import JSON_FORMAT
from ..policy import HealPolicy
from ..store.collector import fewer_collections

if TYPE_CHECKING:  # the rest is imported where used: `--help` loads no ADK, rich or Alembic
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from ..core.heal_record import HealRecord
    from ..core.shards import Shard
    from ..ops.bulk import PrefilterMode, RepairPlan
    from ..ops.scan_report import CallEntry, RepairReport, ScanReport, SupersededEntry
    from ..store import SessionFilter
    from ..store.urls import StoreUrl

__all__ = ["URL_ENV", "main", "parse_duration"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

URL_ENV = "ADK_SESSION_HEAL_URL"
"""The environment variable read when a command's URL argument is omitted."""
FORMATS = ("table", "tsv", "json", "jsonl")
"""What ``--format`` takes."""

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
EXIT_NEEDS_HEALING = 1
"""``scan``: at least one dead call."""
EXIT_BAD_INPUT = 2
"""Bad input or environment: one line on stderr."""
EXIT_SKIPPED = 3
"""``scan`` / ``repair``: done, but damaged or moved sessions were skipped."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT, as shells report it)."""
_PIPED_WIDTH = 100_000
"""Rich's width when stdout is not a terminal: wide enough that no cell is ever cut."""


class CliError(click.ClickException):
    """A library error, shown as one line, exit code 2."""

    exit_code = EXIT_BAD_INPUT


class _Cli(click.Group):
    """The command group; its :meth:`invoke` is the one place errors become exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        """Runs the command; a library error is one line on stderr and exit 2.

        With ``--debug`` the traceback is printed first. An unexpected error
        (a bug) is named by its type only, since its text could quote a
        password; ``--debug`` shows it whole.
        """
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except HealError as exc:
            if ctx.meta.get(_DEBUG):
                traceback.print_exc(file=sys.stderr)
            hint = ctx.meta.get(_WITHOUT_LEDGER)
            if isinstance(exc, LedgerError) and exc.missing and hint:
                raise CliError(f"{exc} (or pass --no-ledger to {hint} without an audit "
                               "trail)") from exc
            raise CliError(str(exc)) from exc
        except Exception as exc:
            if ctx.meta.get(_DEBUG):
                traceback.print_exc(file=sys.stderr)
            raise CliError(
                f"unexpected {type(exc).__name__}: rerun with --debug to see the traceback, "
                "and report it") from exc


_LINES_PER_WRITE = 1_000
"""TSV lines printed per write."""

_DEBUG = "adk_session_heal.debug"
"""``ctx.meta`` key: ``--debug`` was given (before or after the command name)."""

_TYPED = "adk_session_heal.typed"
"""``ctx.meta`` key: options' text as typed, by parameter name (see :func:`_as_typed`)."""

_WITHOUT_LEDGER = "adk_session_heal.without_ledger"
"""``ctx.meta`` key: what the command does without the ledger under ``--no-ledger``
(``"repair"``), named in the hint of a missing-ledger error; unset where it has no such flag."""


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--debug``: remember it for :meth:`_Cli.invoke`; log DEBUG records to stderr."""
    if not value or ctx.meta.get(_DEBUG):
        return
    ctx.meta[_DEBUG] = True
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    heal_logger = logging.getLogger("adk_session_heal")
    level = heal_logger.level
    heal_logger.addHandler(handler)
    heal_logger.setLevel(logging.DEBUG)

    def restore() -> None:
        heal_logger.removeHandler(handler)
        heal_logger.setLevel(level)

    ctx.call_on_close(restore)


def _debug_option(command: F) -> F:
    return click.option(
        "--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
        help="On an error, print the traceback too (it may quote stored data); log the "
        "package's DEBUG records to stderr.",
    )(command)


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


def _as_typed(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Keeps an option's text as typed, for a hint that repeats it (:func:`_selection_in_hint`)."""
    if param.name is not None and value is not None:
        ctx.meta.setdefault(_TYPED, {})[param.name] = value


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    _as_typed(ctx, param, value)
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a library coroutine (its errors reach :meth:`_Cli.invoke`).

    The garbage collector runs less often meanwhile, output included
    (:func:`~adk_session_heal.store.collector.fewer_collections`).
    """
    with fewer_collections():
        return asyncio.run(coroutine)


def _url_argument(command: F) -> F:
    """The URL argument every command takes: typed, or else ``ADK_SESSION_HEAL_URL``.

    Also adds ``--debug``, so it works after the command name too.
    """

    @functools.wraps(command)
    def with_url(*args: Any, url: str | None, **kwargs: Any) -> Any:
        if not url:
            raise CliError(f"no session database given: pass URL (e.g. "
                           f"sqlite:///.adk/session.db) or set {URL_ENV}")
        return command(*args, url=url, **kwargs)

    with_url.__doc__ = (f"{inspect.cleandoc(command.__doc__ or '')}\n\n"
                        f"URL omitted: {URL_ENV} is used.")
    return _debug_option(cast(F, click.argument("url", required=False, envvar=URL_ENV)(
        with_url)))


def _url_in_hint(url: str) -> str:
    """Returns ``" URL"`` (redacted) for a command hint, or ``""`` if it came from the env."""
    from ..store.urls import redact_url
    source = click.get_current_context().get_parameter_source("url")
    return "" if source is click.core.ParameterSource.ENVIRONMENT else f" {redact_url(url)}"


def _selection_in_hint() -> str:
    """Returns the options choosing sessions and ages given on the command line, as typed.

    For a hint naming the next command (``scan`` -> ``repair``), so it works on
    the same sessions with the same ages: ``--app``, ``--user``, ``--session``,
    ``--shard``, ``--since``, ``--older-than``, ``--clock-skew``, ``--timeout``.
    ``--incremental`` is left out: the scan has moved the scope's watermark, so
    a repair with it would read only what changed after the scan.
    """
    ctx = click.get_current_context()
    typed = ctx.meta.get(_TYPED, {})
    words: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name not in _SELECTION or ctx.get_parameter_source(name) is not (
                click.core.ParameterSource.COMMANDLINE):
            continue
        words += [param.opts[0], shlex.quote(str(typed.get(name, ctx.params[name])))]
    return "".join(f" {word}" for word in words)


_SELECTION = frozenset({"app_name", "user_id", "session_id", "shard", "since", "older_than",
                        "clock_skew", "timeout"})
"""The options :func:`_selection_in_hint` repeats."""


def _filters(command: F) -> F:
    for option in reversed((
        click.option("--app", "app_name", help="Only this app's sessions."),
        click.option("--user", "user_id", help="Only this user's sessions."),
        click.option("--session", "session_id", help="Only this session."),
    )):
        command = option(command)
    return command


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> Shard | None:
    from ..core.shards import Shard
    _as_typed(ctx, param, value)
    try:
        return None if value is None else Shard.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _since(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    from ..store.incremental import parse_since
    _as_typed(ctx, param, value)
    try:
        return None if value is None else parse_since(value, time.time())
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def _changed_only(where: SessionFilter, since: float | None, incremental: bool) -> None:
    """Refuses ``--since`` with ``--incremental``, and ``--incremental`` with ``--session``."""
    from ..store.incremental import check_request
    try:
        check_request(where, since=since is not None, incremental=incremental)
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def _fleet(command: F) -> F:
    """``--shard``, ``--full-scan``, ``--prefilter``, ``--incremental``, ``--since``."""
    command = click.option(
        "--since", callback=_since, metavar="WHEN",
        help="Only sessions updated since WHEN (a duration such as 2h or 3d, or an ISO 8601 "
        "time), as stored in sessions.update_time, less --clock-skew.",
    )(command)
    command = click.option(
        "--incremental", is_flag=True,
        help="Only sessions updated since this app/user/shard's last --incremental run, and "
        "those it left unsettled (a first run reads all); saves the new state in the ledger "
        "(revision 0005: db upgrade).",
    )(command)
    command = click.option(
        "--full-scan", "prefilter", flag_value="never",
        help="Classify every session in Python instead of letting the database pick the "
        "ones that can hold a finding first (the SQL prefilter, used by default on "
        "PostgreSQL; it hands any row it cannot read to Python).",
    )(command)
    command = click.option(
        "--prefilter", "prefilter", flag_value="always",
        help="Use the SQL prefilter on SQLite and MySQL/MariaDB too (measured slower there).",
    )(command)
    # The default needs a flag of its own: click 8.1 reads a string default on either
    # flag above as that flag's value (so no flag would mean --full-scan).
    command = click.option("--auto-prefilter", "prefilter", flag_value="auto", default=True,
                           hidden=True)(command)
    return click.option(
        "--shard", callback=_shard, metavar="I/N",
        help="Only the I-th of N parts of the sessions (by a stable hash of the session "
        "key; I counts from 1): run N jobs side by side, --shard 1/N ... --shard N/N.",
    )(command)


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
        "this plus --clock-skew (by their stored time); younger ones are listed as in "
        "flight. Calls superseded by a later invocation are dead at any age.",
    )(command)


def _timeout(command: F) -> F:
    return click.option(
        "--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
        help="How long to wait for a database server, to connect and for each statement "
        "[default: 10 to connect, 60 per statement].",
    )(command)


def _json_flag(command: F) -> F:
    """``--json`` alone (the ``db`` commands print a line or a script, or one document)."""
    return click.option(
        "--json", "as_json", is_flag=True,
        help=f"Print one JSON document (\"version\": {JSON_FORMAT}).",
    )(command)


def _output_format(command: F) -> F:
    """``--format`` and ``--json``: the command receives ``output``, one of :data:`FORMATS`."""

    @functools.wraps(command)
    def with_format(*args: Any, output: str | None, as_json: bool, **kwargs: Any) -> Any:
        if as_json and output not in (None, "json"):
            raise click.UsageError(f"--json is --format json: it cannot go with --format {output}")
        if as_json:
            output = "json"
        elif output is None:
            output = "table" if sys.stdout.isatty() else "tsv"
        return command(*args, output=output, **kwargs)

    with_format = click.option(
        "--json", "as_json", is_flag=True,
        help=f"Short for --format json (a document with \"version\": {JSON_FORMAT}).",
    )(with_format)
    return cast(F, click.option(
        "--format", "output", type=click.Choice(FORMATS),
        help="table: rich tables; tsv: header + one record per line; json: one document; "
        "jsonl: one record per line + a summary line [default: table on a terminal, "
        "tsv otherwise].",
    )(with_format))


class _Bar:
    """A rich progress bar task as a :class:`~adk_session_heal.ops.bulk.ScanProgress`."""

    def __init__(self, progress: Progress, description: str) -> None:
        self._progress = progress
        self._task = progress.add_task(description, total=None)

    def start(self, total_sessions: int) -> None:
        self._progress.update(self._task, total=total_sessions)

    def advance(self, sessions: int) -> None:
        self._progress.advance(self._task, sessions)


@contextmanager
def _progress(output: str) -> Iterator[Progress | None]:
    """A progress display on stderr for ``table`` output on a terminal; else ``None``."""
    if output != "table" or not (sys.stdout.isatty() and sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), transient=True,
    )
    with progress:
        yield progress


def _scan_bar(progress: Progress | None) -> _Bar | None:
    return None if progress is None else _Bar(progress, "scanning sessions")


def _console(*, stderr: bool = False) -> Console:
    """Returns a console that prints stored text literally (no markup, no highlighting).

    When its stream is not a terminal it is wide enough that no cell is ever
    cut, and prints no colour.
    """
    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(markup=False, highlight=False, stderr=stderr)
    return Console(markup=False, highlight=False, stderr=stderr, width=_PIPED_WIDTH,
                   color_system=None, soft_wrap=True)


def _note(output: str, text: str) -> None:
    """Prints a summary or hint: on stdout with tables, on stderr with data formats."""
    click.echo(text, err=output != "table")


def _print_lines(output: str, records: Iterable[dict[str, Any]], summary: dict[str, Any],
                 columns: Sequence[str]) -> None:
    """Prints the line formats: ``jsonl`` records then a summary line, or ``tsv``."""
    from ..ops.scan_report import tsv_lines
    if output == "jsonl":
        for record in records:
            click.echo(json.dumps({"version": JSON_FORMAT, **record}))
        click.echo(json.dumps({"version": JSON_FORMAT, "kind": "summary", **summary}))
    else:
        # A chunk of lines per write: one echo per line cost a tenth of a large repair's output.
        lines = tsv_lines(records, columns)
        while chunk := list(itertools.islice(lines, _LINES_PER_WRITE)):
            click.echo("\n".join(chunk))


def _print_json(document: dict[str, Any]) -> None:
    click.echo(json.dumps(document, indent=2))


def _table(title: str, columns: Sequence[str]) -> Table:
    """A table whose cells wrap (ids fold) rather than end in an ellipsis."""
    from rich.table import Table
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _calls_table(title: str, entries: list[CallEntry], report: ScanReport,
                 *, why: bool = False) -> Table:
    from ..ops.scan_report import format_duration
    now, dead_after = report.scanned_at, report.dead_after
    columns = ["session (app/user/id)", "call id", "tool", "invocation", "age", "status"]
    table = _table(title, [*columns, "why not healed"] if why else columns)
    for e in entries:
        status = e.status + (f" ({e.pending_reason})" if e.pending_reason else "")
        age = format_duration(now - e.timestamp, exact=False)
        row = [f"{e.app_name}/{e.user_id}/{e.session_id}", e.call_id or "(none)",
               e.tool_name, e.invocation_id, age, status]
        if why:
            row.append(e.to_json(now, dead_after)["why"])
        table.add_row(*row)
    return table


def _print_scan_tables(console: Console, report: ScanReport) -> None:
    from ..ops.scan_report import format_duration
    console.print(report.summary_line())
    if report.dead_calls:
        console.print(_calls_table("Dead calls (healed by repair)", report.dead_calls, report))
    if report.in_flight_calls:
        limit = ("no age limit" if report.dead_after is None
                 else f"dead once older than {format_duration(report.dead_after)}")
        console.print(_calls_table(f"In-flight calls (not healed: {limit})",
                                   report.in_flight_calls, report, why=True))
    if report.pending_calls:
        console.print(_calls_table("Pending calls (never healed)", report.pending_calls, report,
                                   why=True))
    if report.id_less_calls:
        console.print(_calls_table("Calls without an id (never healed)", report.id_less_calls,
                                   report))
    if report.unhealable_calls:
        console.print(_calls_table("Unanswered calls a heal would make worse (never healed)",
                                   report.unhealable_calls, report, why=True))
    if report.orphaned_responses:
        table = _table("Orphaned responses (never healed)",
                       ("session (app/user/id)", "event", "call id", "tool"))
        for r in report.orphaned_responses:
            table.add_row(f"{r.app_name}/{r.user_id}/{r.session_id}", r.event_id,
                          r.call_id or "(none)", r.tool_name)
        console.print(table)
    if report.damaged_rows:
        from ..ops.scan_report import counted
        table = _table(f"Damaged rows: {counted(report.damaged_sessions, 'session')} skipped whole "
                       "(never healed)", ("session (app/user/id)", "event", "problem"))
        for d in report.damaged_rows:
            table.add_row(f"{d.app_name}/{d.user_id}/{d.session_id}", d.event_id or "(unknown)",
                          d.problem)
        console.print(table)
    if report.superseded_heals:
        console.print(_superseded_table(
            "Heals superseded by a late result (taken back by repair)",
            [(h, None) for h in report.superseded_heals]))


def _superseded_table(title: str, rows: Sequence[tuple[SupersededEntry, str | None]]) -> Table:
    table = _table(title, ("session (app/user/id)", "synthetic event", "calls",
                           "real responses", *(("result",) if rows and rows[0][1] else ())))
    for h, result in rows:
        table.add_row(f"{h.app_name}/{h.user_id}/{h.session_id}", h.synthetic_event_id,
                      ", ".join(f"{n}({i})" for i, n in zip(h.call_ids, h.tool_names,
                                                             strict=True)),
                      ", ".join(h.response_event_ids), *((result,) if result else ()))
    return table


def _print_repair_tables(console: Console, report: RepairReport, *,
                         preview: bool = False, undo_hint: str | None = None) -> None:
    _print_scan_tables(console, report.scan)
    if report.heals:
        table = _table("Synthetic responses", ("session (app/user/id)", "call event",
                                               "synthetic event", "calls", "reason", "result"))
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
    if report.removals and not report.dry_run:
        console.print(_superseded_table("Superseded heals", [
            (h, outcome.value if outcome is not None else "would take back")
            for h, outcome in report.removals]))
    if preview:
        return
    if report.dry_run:
        for heal in report.heals:
            console.print(f"would insert event {heal.record.synthetic_event_id!r} into session "
                          f"{heal.record.app_name}/{heal.record.user_id}/"
                          f"{heal.record.session_id}:")
            console.print_json(data=heal.event_data)
    if undo_hint is not None:
        console.print(undo_hint)
    console.print(report.summary_line())


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="adk-session-heal")
@_debug_option
def main() -> None:
    """Find and heal ADK sessions left with unanswered tool calls.

    URL is an ADK session database, as ADK takes it: sqlite:///.adk/session.db
    (ADK's SqliteSessionService), sqlite+aiosqlite:///sessions.db,
    postgresql+asyncpg://user:pass@host/db, mysql+aiomysql://user:pass@host/db.
    Omit it to use the ADK_SESSION_HEAL_URL environment variable.

    Exit codes: 0 nothing to do or done; 1 scan found something to heal; 2 bad
    input or environment (one line on stderr; --debug adds the traceback);
    3 done, but some sessions were skipped; 130 interrupted.
    """
    # A repair run also logs on the package logger (a summary line, each heal at
    # DEBUG), for services that collect logs; the CLI prints its own output, so
    # without a configured handler those records must not fall through to
    # Python's last-resort stderr handler. --debug sends them to stderr.
    heal_logger = logging.getLogger("adk_session_heal")
    if not heal_logger.handlers:
        heal_logger.addHandler(logging.NullHandler())


@main.command("scan")
@_url_argument
@_filters
@_fleet
@_older_than
@_timeout
@_output_format
def scan_command(url: str, app_name: str | None, user_id: str | None, session_id: str | None,
                 shard: Shard | None, prefilter: PrefilterMode, incremental: bool,
                 since: float | None, older_than: float, clock_skew: float,
                 timeout: float | None, output: str) -> None:
    """Report dead tool calls, and the in-flight and pending ones, read-only.

    Exit 0: nothing to heal; 1: something needs healing (wins over 3); 2: bad
    input or environment (one line on stderr); 3: nothing to heal, but sessions
    with damaged rows were skipped (listed with their event ids).

    Example: adk-session-heal scan sqlite:///.adk/session.db --older-than 1h
    """
    from ..ops.bulk import scan
    from ..ops.scan_report import SCAN_COLUMNS
    from ..store import SessionFilter
    where = SessionFilter(app_name, user_id, session_id, shard)
    _changed_only(where, since, incremental)
    with _progress(output) as progress:
        report = _run(scan(url, where=where, stale_after=older_than, clock_skew=clock_skew,
                           progress=_scan_bar(progress), timeout=timeout,
                           prefilter=prefilter, since=since, incremental=incremental))
    if output == "table":
        _print_scan_tables(_console(), report)
    else:
        if output == "json":
            _print_json(report.to_json())
        else:
            _print_lines(output, report.records(), report.summary_json(), SCAN_COLUMNS)
        _note(output, report.summary_line())
    if report.needs_healing:
        _note(output, f"Run `adk-session-heal repair{_url_in_hint(url)}{_selection_in_hint()}` "
              "to heal them "
              "(--dry-run shows what it would write).")
    sys.exit(EXIT_NEEDS_HEALING if report.needs_healing
             else EXIT_SKIPPED if report.damaged_rows else 0)


@main.command("repair")
@_url_argument
@_filters
@_fleet
@_older_than
@click.option("--dry-run", is_flag=True, help="Print exactly what would be written; write nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--no-ledger", is_flag=True, help="Do not record heals in the heal ledger.")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1),
              help="Synthetic events per transaction.")
@click.option("--undo", "undo_run", metavar="RUN_ID",
              help="Take back the heals repair run RUN_ID wrote (history --runs lists runs).")
@_timeout
@_output_format
def repair_command(url: str, app_name: str | None, user_id: str | None, session_id: str | None,
                   shard: Shard | None, prefilter: PrefilterMode, incremental: bool,
                   since: float | None, older_than: float, clock_skew: float, dry_run: bool,
                   yes: bool, no_ledger: bool, batch_size: int, undo_run: str | None,
                   timeout: float | None, output: str) -> None:
    """Heal dead tool calls: one synthetic error response per dead call event.

    Idempotent and safe to interrupt: a rerun finishes the job and heals nothing
    twice. Only inserts rows; never updates sessions.update_time. Without
    --yes it shows its plan and asks on the terminal (both on stderr).

    Each run gets a run id, printed in --json and listed by history --runs;
    --undo RUN_ID takes back exactly the heals that run wrote (rows changed since
    are kept and reported), so a later repair may heal those calls again.

    Exit 0: done (or nothing to do); 2: bad input or environment (one line on
    stderr); 3: done, but something was skipped: sessions with damaged rows,
    sessions that changed or were deleted since the scan, or superseded heals kept
    because they changed since written or are not ours (--undo: rows kept).

    Example: adk-session-heal db upgrade URL && adk-session-heal repair URL --yes
    """
    from ..ops.bulk import apply_plan, check_repairable, plan_repair
    from ..ops.scan_report import REPAIR_COLUMNS, RepairReport, counted
    from ..store import SessionFilter
    where = SessionFilter(app_name, user_id, session_id, shard)
    policy = HealPolicy(stale_after=older_than, clock_skew=clock_skew)
    if not dry_run and not yes and not sys.stdin.isatty():
        raise CliError("repair writes to the database: pass --yes to confirm "
                       "(or --dry-run to see what it would write)")
    if undo_run is not None:
        if no_ledger or where != SessionFilter() or incremental or since is not None:
            raise CliError("--undo takes back a whole run, recorded in the ledger: it goes "
                           "with neither --no-ledger nor --app/--user/--session/--shard/"
                           "--incremental/--since")
        _undo(url, undo_run, dry_run=dry_run, yes=yes, batch_size=batch_size, timeout=timeout,
              output=output)
        return
    _changed_only(where, since, incremental)
    click.get_current_context().meta[_WITHOUT_LEDGER] = "repair"
    if not dry_run:
        _run(check_repairable(url, ledger=not no_ledger, timeout=timeout))
    with _progress(output) as progress:
        plan: RepairPlan = _run(plan_repair(url, where=where, policy=policy,
                                            progress=_scan_bar(progress), timeout=timeout,
                                            prefilter=prefilter, since=since,
                                            incremental=incremental, writing=not dry_run))
    if dry_run:
        report = RepairReport.dry(plan.scan, plan.heals)
    else:
        superseded = len(plan.scan.superseded_heals)
        if not yes and (plan.heals or superseded):
            _print_repair_tables(_console(stderr=True), RepairReport.dry(plan.scan, plan.heals),
                                 preview=True)
            taking = (f" and take back {counted(superseded, 'superseded heal')}"
                      if superseded else "")
            click.confirm(f"Write {counted(len(plan.heals), 'synthetic event')}{taking} into "
                          f"{plan.url}?", abort=True, err=True)
        with _progress(output) as progress:
            on_heal: Callable[[HealRecord], object] | None = None
            if progress is not None:
                bar = _Bar(progress, "writing synthetic events")
                bar.start(len(plan.heals))
                on_heal = lambda _record: bar.advance(1)  # noqa: E731
            report = _run(apply_plan(plan, ledger=not no_ledger, batch_size=batch_size,
                                     on_heal=on_heal, timeout=timeout))
    if output == "table":
        _print_repair_tables(_console(), report, undo_hint=(
            None if report.run_id is None else f"Run {report.run_id}: `adk-session-heal "
            f"repair{_url_in_hint(url)} --undo {report.run_id}` takes it back."))
    else:
        if output == "json":
            _print_json(report.to_json())
        else:
            _print_lines(output, report.records(), report.summary_json(), REPAIR_COLUMNS)
        _note(output, report.scan.summary_line())
        _note(output, report.summary_line())
    sys.exit(EXIT_SKIPPED if report.skipped or report.scan.damaged_rows or report.kept_back
             else 0)


def _undo(url: str, run_id: str, *, dry_run: bool, yes: bool, batch_size: int,
          timeout: float | None, output: str) -> None:
    """``repair --undo``: shows the plan, asks (on a terminal, without --yes), undoes, prints."""
    from ..ops.scan_report import counted
    from ..ops.undo import UNDO_COLUMNS, undo
    from ..store.base import RemoveOutcome
    if not dry_run and not yes:
        preview = _run(undo(url, run_id, dry_run=True, timeout=timeout))
        click.echo(preview.summary_line(), err=True)
        if preview.removals:
            click.confirm(f"Take {counted(len(preview.removals), 'heal')} of run {run_id} out of "
                          f"{preview.url}?", abort=True, err=True)
    report = _run(undo(url, run_id, dry_run=dry_run, batch_size=batch_size, timeout=timeout))
    if output == "table":
        table = _table(f"Heals of run {run_id}", ("session (app/user/id)", "call event",
                                                   "synthetic event", "calls", "result"))
        for record in report.records():
            table.add_row(f"{record['app_name']}/{record['user_id']}/{record['session_id']}",
                          record["call_event_id"], record["synthetic_event_id"],
                          ", ".join(record["call_ids"]), record["outcome"] or "would take out")
        console = _console()
        console.print(table)
        console.print(report.summary_line())
    else:
        if output == "json":
            _print_json(report.to_json())
        else:
            _print_lines(output, report.records(), report.summary_json(), UNDO_COLUMNS)
        _note(output, report.summary_line())
    sys.exit(EXIT_SKIPPED if report.count(RemoveOutcome.KEPT) else 0)


class _ReviewGroup(click.Group):
    """``review [URL]`` lists; ``review resolve CALL_ID ...`` resolves."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Routes anything but a subcommand name or ``--help`` to ``review list``."""
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["list", *args]
        return super().parse_args(ctx, args)


@main.group("review", cls=_ReviewGroup)
def review_group() -> None:
    """Check healed calls whose side effects may have happened, and record what did.

    `review [URL]` (same as `review list`) lists every dead or healed call to a
    side_effect or unknown tool whose outcome is may_have_run or unknown: session,
    tool, arguments (secrets redacted), age. `review resolve CALL_ID [URL]
    --result JSON | --failed TEXT` writes the call's true outcome as its response and
    takes back the answer it supersedes (the heal, or an earlier resolution) in one
    transaction, recording who, when and what in the ledger. Another outcome later is
    a correction; a resolve that lost a race with another operator writes nothing
    and says what is stored.
    """


@review_group.command("list")
@_url_argument
@_filters
@_older_than
@_timeout
@_output_format
def review_list_command(url: str, app_name: str | None, user_id: str | None,
                        session_id: str | None, older_than: float, clock_skew: float,
                        timeout: float | None, output: str) -> None:
    """List the calls a person should check (read-only).

    Example: adk-session-heal review sqlite:///.adk/session.db
    """
    from ..ops.operator_review import REVIEW_COLUMNS, review
    from ..store import SessionFilter
    report = _run(review(url, where=SessionFilter(app_name, user_id, session_id),
                         stale_after=older_than, clock_skew=clock_skew, timeout=timeout))
    if output == "table":
        console = _console()
        if report.calls:
            table = _table("Calls to check", ("session (app/user/id)", "call", "tool",
                                              "arguments", "age", "status", "outcome"))
            for record in report.records():
                table.add_row(f"{record['app_name']}/{record['user_id']}/"
                              f"{record['session_id']}", record["call_id"],
                              record["tool_name"], record["args"],
                              _age(record["age_seconds"]), record["status"],
                              record["run_outcome"])
            console.print(table)
        console.print(report.summary_line())
    elif output == "json":
        _print_json(report.to_json())
    else:
        _print_lines(output, report.records(), report.summary_json(), REVIEW_COLUMNS)
    if output != "table":
        _note(output, report.summary_line())
    if report.calls:
        _note(output, "Check each in the real system, then record what happened: "
              f"`adk-session-heal review resolve CALL_ID{_url_in_hint(url)} --result JSON` "
              "(or --failed TEXT instead of --result JSON; add --session ID where a call id "
              "is listed in several sessions).")


def _age(seconds: float) -> str:
    from ..ops.scan_report import format_duration
    return format_duration(seconds, exact=False)


@review_group.command("resolve")
@click.argument("call_id")
@_url_argument
@_filters
@click.option("--result", "result_json", metavar="JSON",
              help="What the tool really returned, as JSON (an object, or any value: "
              "stored as {\"result\": value}).")
@click.option("--failed", metavar="TEXT", help="The tool really failed: stored as "
              "{\"error\": TEXT}.")
@click.option("--by", metavar="NAME", help="Who resolves it [default: user@host].")
@click.option("--no-ledger", is_flag=True, help="Do not record it in the ledger.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@_timeout
@_json_flag
def review_resolve_command(call_id: str, url: str, app_name: str | None, user_id: str | None,
                           session_id: str | None, result_json: str | None, failed: str | None,
                           by: str | None, no_ledger: bool, yes: bool, timeout: float | None,
                           as_json: bool) -> None:
    """Write a healed call's true outcome as its response; take back what it replaces.

    Example: adk-session-heal review resolve call-7 URL --result '{"charged": true}' --yes
    """
    from ..core.review import check_text, parse_response
    from ..ops.operator_review import resolve
    from ..store import SessionFilter
    if (result_json is None) == (failed is None):
        raise CliError("pass exactly one of --result JSON and --failed TEXT")
    response: dict[str, Any]
    if failed is not None:
        check_text(failed, "--failed")
        response = {"error": failed}
    else:
        response = parse_response(result_json or "", "--result")
    if by is not None:
        check_text(by, "--by")
    if not yes:
        if not sys.stdin.isatty():
            raise CliError("review resolve writes to the database: pass --yes to confirm")
        click.confirm(f"Write {json.dumps(response)} as the response of call {call_id}?",
                      abort=True, err=True)
    click.get_current_context().meta[_WITHOUT_LEDGER] = "resolve it"
    report = _run(resolve(url, call_id, response,
                          where=SessionFilter(app_name, user_id, session_id), by=by,
                          ledger=not no_ledger, timeout=timeout))
    if as_json:
        _print_json(report.to_json())
        click.echo(report.summary_line(), err=True)
    else:
        click.echo(report.summary_line())


@main.command("history")
@_url_argument
@_filters
@click.option("--runs", "show_runs", is_flag=True,
              help="List the repair and undo runs (id, host, times, counts) instead of heals.")
@_timeout
@_output_format
def history_command(url: str, app_name: str | None, user_id: str | None,
                    session_id: str | None, show_runs: bool, timeout: float | None,
                    output: str) -> None:
    """Show what was healed, when and why (from the heal ledger).

    --runs lists the repair runs instead (what `repair --undo RUN_ID` takes).

    Example: adk-session-heal history postgresql+asyncpg://app@db/sessions --json
    """
    from ..ops.scan_report import HISTORY_COLUMNS, history_json, history_records

    if show_runs:
        if (app_name, user_id, session_id) != (None, None, None):
            raise CliError("--runs lists whole runs: it goes with no "
                                   "--app/--user/--session")
        _history_runs(url, timeout, output)
        return

    shown_url, records = _run(_read_ledger(url, timeout, lambda ledger: ledger.history(
        app_name=app_name, user_id=user_id, session_id=session_id)))
    summary = f"Heals recorded in {shown_url}: {len(records)}"
    if output != "table":
        if output == "json":
            _print_json(history_json(shown_url, records))
        else:
            _print_lines(output, history_records(records),
                         {"command": "history", "url": shown_url,
                          "heals_recorded": len(records)}, HISTORY_COLUMNS)
        _note(output, summary)
        return
    table = _table(f"Heals recorded in {shown_url}", (
        "healed at (UTC)", "session (app/user/id)", "synthetic event", "tools", "reason",
        "trigger"))
    for r in records:
        when = datetime.fromtimestamp(r.healed_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(when, f"{r.app_name}/{r.user_id}/{r.session_id}", r.synthetic_event_id,
                      ", ".join(r.tool_names), r.reason, r.trigger.value)
    console = _console()
    console.print(table)
    console.print(summary)


async def _read_ledger(url: str, timeout: float | None,
                       read: Callable[[Any], Awaitable[T]]) -> tuple[str, T]:
    """Checks the store's URL, then reads its heal ledger (SQL or Redis): (shown URL, result)."""
    from ..store import open_store
    from ..store.ledger.heal_ledger import open_heal_ledger

    store = await open_store(url, timeout=timeout)
    await store.close()
    assert store.url is not None
    ledger = open_heal_ledger(store.url, timeout=timeout)
    try:
        return str(store.url), await read(ledger)
    finally:
        await ledger.close()


def _history_runs(url: str, timeout: float | None, output: str) -> None:
    """``history --runs``: the runs, oldest first."""
    from ..ops.scan_report import RUNS_COLUMNS, runs_json, runs_records

    shown_url, runs = _run(_read_ledger(url, timeout, lambda ledger: ledger.runs()))
    summary = f"Runs recorded in {shown_url}: {len(runs)}"
    if output != "table":
        if output == "json":
            _print_json(runs_json(shown_url, runs))
        else:
            _print_lines(output, runs_records(runs),
                         {"command": "history --runs", "url": shown_url, "runs": len(runs)},
                         RUNS_COLUMNS)
        _note(output, summary)
        return
    table = _table(f"Runs recorded in {shown_url}", (
        "run id", "kind", "started (UTC)", "finished (UTC)", "host", "written", "removed",
        "undone", "kept"))

    def when(at: float | None) -> str:
        return ("unfinished" if at is None
                else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S"))

    for run in runs:
        kind = run.kind.value if run.undoes is None else f"undo of {run.undoes}"
        table.add_row(run.run_id, kind, when(run.started_at), when(run.finished_at), run.host,
                      str(run.written), str(run.removed), str(run.undone),
                      "" if run.kept is None else str(run.kept))
    console = _console()
    console.print(table)
    console.print(summary)


@main.group("db")
def db_group() -> None:
    """Manage adk-session-heal's own tables (the heal ledger) in a session database.

    Only our seven tables change: the heal ledger, tool runs, removals, runs,
    watermarks and unsettled sessions (adk_session_heal_*), and the version
    table adk_session_heal_alembic_version. ADK's tables, and the synthetic
    events already written into sessions, are never touched. Each revision
    step is one transaction on SQLite and PostgreSQL; on MySQL and MariaDB
    (whose DDL commits at once) a step stopped midway is reported by
    `db current` and finished by the next db command. --sql prints the SQL for
    the URL's engine without connecting, for review before it runs.
    """


def _store_url(url: str) -> StoreUrl:
    """Parses a URL for the db commands (a bad one: one line, exit 2)."""
    from ..store.urls import parse_store_url
    try:
        return parse_store_url(url)
    except HealError as exc:
        raise CliError(str(exc)) from exc


def _sql_script(url: StoreUrl, action: Literal["upgrade", "downgrade"],
                revision: str) -> tuple[str, str | None]:
    """Returns the offline SQL and the revision it leaves the database at."""
    from ..store.ledger import migrations as migrate
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
    from ..ops.migration_report import migration_json
    from ..store.ledger import migrations as migrate
    head = migrate.head_revision()
    if as_json:
        _print_json(migration_json(command, url, target=target, revision=revision, head=head,
                                   sql=sql))
    elif sql is not None:
        click.echo(sql, nl=False)
    else:
        click.echo(f"heal ledger at revision {revision or 'none'} (head {head})")


@db_group.command("upgrade")
@_url_argument
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
    from ..store.ledger import migrations as migrate
    store_url = _store_url(url)
    if sql_only:
        sql, now = _sql_script(store_url, "upgrade", revision)
    else:
        sql, now = None, _run(migrate.upgrade(store_url, revision, timeout=timeout))
    _print_migration("db upgrade", store_url, revision, now, sql, as_json)


@db_group.command("downgrade")
@click.argument("url")
@click.argument("revision")
@_debug_option
@_sql_flag
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@_timeout
@_json_flag
def db_downgrade(url: str, revision: str, sql_only: bool, yes: bool, timeout: float | None,
                 as_json: bool) -> None:
    """Downgrade the heal ledger to REVISION; "base" drops our seven tables.

    URL is never read from ADK_SESSION_HEAL_URL here: a command that drops
    tables names its database.

    Only our tables change, and each step drops only what its revision added:
    base drops all seven, the version table included (the ledgers' records
    are lost). Going below 0004 drops the runs and each row's run id; a heal
    recorded by several runs (written, undone, written again) keeps its newest
    row only, since 0003 holds one row per heal. The synthetic events already
    written into sessions stay, and `repair` never heals a call twice (their
    ids are deterministic); `db upgrade` recreates empty tables.

    With --sql, the SQL from the newest revision down to REVISION (or FROM:TO).

    Example: adk-session-heal db downgrade sqlite:///.adk/session.db base --sql
    """
    from ..store.ledger import migrations as migrate
    store_url = _store_url(url)
    if sql_only:
        sql, now = _sql_script(store_url, "downgrade", revision)
        _print_migration("db downgrade", store_url, revision, now, sql, as_json)
        return
    try:  # "-1" counts from the database's revision, known once connected
        target = revision if revision[:1] in "+-" else migrate.resolve_revision(revision)
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
@_url_argument
@_timeout
@_json_flag
def db_current(url: str, timeout: float | None, as_json: bool) -> None:
    """Print the heal ledger's revision ("none" when not installed). Read-only.

    Example: adk-session-heal db current sqlite:///.adk/session.db --json
    """
    from ..ops.migration_report import current_json
    from ..store.ledger import migrations as migrate
    store_url = _store_url(url)
    now = _run(migrate.current(store_url, timeout=timeout))
    head = migrate.head_revision()
    if as_json:
        _print_json(current_json(store_url, revision=now, head=head))
    else:
        click.echo(f"heal ledger at revision {now or 'none'} (head {head})")


@db_group.command("history")
@click.argument("url", required=False, envvar=URL_ENV)
@_debug_option
@_timeout
@_json_flag
def db_history(url: str | None, timeout: float | None, as_json: bool) -> None:
    """List the heal ledger's migrations, newest first; with URL, mark the current one.

    URL omitted: ADK_SESSION_HEAL_URL is used if set.

    Needs no database without URL; with it, read-only.

    Example: adk-session-heal db history sqlite:///.adk/session.db
    """
    from ..ops.migration_report import history_json as db_history_json
    from ..store.ledger import migrations as migrate
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
@click.option("--keep", is_flag=True,
              help="Keep the demo's SQLite database and print where it is (deleted otherwise).")
def demo_command(keep: bool) -> None:
    """Crash a real ADK run mid-tool on embedded SQLite, then heal it.

    Example: adk-session-heal demo --keep
    """
    from rich.console import Console

    demo = importlib.import_module("adk_session_heal.cli.demo")
    sys.exit(asyncio.run(demo.run_demo(Console(), keep=keep)))
