"""How the commands print: rich tables, progress bars, JSON documents, JSONL and TSV lines.

Rich is imported inside the functions that draw with it, so ``--help`` and
the data formats (``tsv``, ``json``, ``jsonl``) never load it. Stored text is
printed literally (no markup, no highlighting), and off a terminal no cell is
ever cut and no colour is printed.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import click

from ..ops.json_version import JSON_FORMAT

if TYPE_CHECKING:  # imported where used: `--help` loads no rich
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from ..ops.repair_report import RepairReport
    from ..ops.scan_report import CallEntry, ScanReport, SupersededEntry

_PIPED_WIDTH = 100_000
"""Rich's width when stdout is not a terminal: wide enough that no cell is ever cut."""

_LINES_PER_WRITE = 1_000
"""TSV lines printed per write."""


class _Bar:
    """A rich progress bar task as a :class:`~adk_session_heal.ops.scan.ScanProgress`."""

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
    from ..ops.text_output import tsv_lines
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


def _print_data(output: str, summaries: Sequence[str], document: Callable[[], dict[str, Any]],
                records: Callable[[], Iterable[dict[str, Any]]], header: dict[str, Any],
                columns: Sequence[str]) -> None:
    """Prints a list in a data format (``json``, ``jsonl`` or ``tsv``), then its summary.

    Args:
        output: The format: anything but ``table``.
        summaries: The summary lines (on stderr).
        document: Builds the ``json`` document (called for ``json`` only).
        records: Gives the ``jsonl`` and ``tsv`` records (not called for ``json``).
        header: The fields of the ``jsonl`` summary line.
        columns: The ``tsv`` columns.
    """
    if output == "json":
        _print_json(document())
    else:
        _print_lines(output, records(), header, columns)
    for summary in summaries:
        _note(output, summary)


class _Report(Protocol):
    """What every operator report gives the data formats."""

    def to_json(self) -> dict[str, Any]: ...

    def records(self) -> Iterable[dict[str, Any]]: ...

    def summary_json(self) -> dict[str, Any]: ...

    def summary_line(self) -> str: ...


def _print_report(output: str, report: _Report, columns: Sequence[str], *,
                  first: str | None = None) -> None:
    """Prints a report in a data format, then its summary line (after ``first``, if given).

    The ``jsonl`` summary line alone needs ``summary_json``, which builds the
    whole JSON document: no other format pays for it.
    """
    header = report.summary_json() if output == "jsonl" else {}
    _print_data(output, [*([first] if first is not None else []), report.summary_line()],
                report.to_json, report.records, header, columns)


def _table(title: str, columns: Sequence[str]) -> Table:
    """A table whose cells wrap (ids fold) rather than end in an ellipsis."""
    from rich.table import Table
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _age(seconds: float) -> str:
    from ..core.durations import format_duration
    return format_duration(seconds, exact=False)


def _calls_table(title: str, entries: list[CallEntry], report: ScanReport,
                 *, why: bool = False) -> Table:
    from ..core.durations import format_duration
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
    from ..core.durations import format_duration
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
        from ..ops.text_output import counted
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
