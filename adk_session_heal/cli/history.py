"""``adk-session-heal history``: what the heal ledger recorded, heal by heal or run by run.

Both lists are read through the store's heal ledger (SQL or Redis), after the
URL is checked as every other command checks it; ``--runs`` lists the runs
that ``repair --undo RUN_ID`` takes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from .exits import CliError, _run
from .options import _filters, _output_format, _timeout, _url_argument
from .render import _console, _print_data, _table

T = TypeVar("T")


@click.command("history")
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
    from ..ops.ledger_documents import history_json, history_records
    from ..ops.text_output import HISTORY_COLUMNS

    if show_runs:
        if (app_name, user_id, session_id) != (None, None, None):
            raise CliError("--runs lists whole runs: it goes with no "
                                   "--app/--user/--session")
        _history_runs(url, timeout, output)
        return

    shown_url, records = _run(_read_ledger(url, timeout, lambda ledger: ledger.history(
        app_name=app_name, user_id=user_id, session_id=session_id)))
    _show(output, _Listing(
        f"Heals recorded in {shown_url}", len(records),
        lambda: history_json(shown_url, records), lambda: history_records(records),
        {"command": "history", "url": shown_url, "heals_recorded": len(records)},
        HISTORY_COLUMNS,
        ("healed at (UTC)", "session (app/user/id)", "synthetic event", "tools", "reason",
         "trigger"),
        lambda: [(_when(r.healed_at), f"{r.app_name}/{r.user_id}/{r.session_id}",
                  r.synthetic_event_id, ", ".join(r.tool_names), r.reason, r.trigger.value)
                 for r in records]))


@dataclass(frozen=True)
class _Listing:
    """One list the command prints: its title, its documents and its table's rows."""

    title: str
    count: int
    document: Callable[[], dict[str, Any]]
    records: Callable[[], Iterable[dict[str, Any]]]
    summary_record: dict[str, Any]
    columns: Sequence[str]
    headers: tuple[str, ...]
    rows: Callable[[], list[tuple[str, ...]]]


def _show(output: str, listing: _Listing) -> None:
    """Prints a listing in ``output``'s format: a table and its count, or the data."""
    summary = f"{listing.title}: {listing.count}"
    if output != "table":
        _print_data(output, [summary], listing.document, listing.records,
                    listing.summary_record, listing.columns)
        return
    table = _table(listing.title, listing.headers)
    for row in listing.rows():
        table.add_row(*row)
    console = _console()
    console.print(table)
    console.print(summary)


def _when(at: float | None) -> str:
    """A ledger time as the tables print it (UTC), or ``unfinished``."""
    return ("unfinished" if at is None
            else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S"))


async def _read_ledger(url: str, timeout: float | None,
                       read: Callable[[Any], Awaitable[T]]) -> tuple[str, T]:
    """Checks the store's URL, then reads its heal ledger (SQL or Redis): (shown URL, result)."""
    from ..store import open_store

    store = await open_store(url, timeout=timeout)
    try:
        ledger = store.heal_ledger(timeout)
        try:
            return str(store.url), await read(ledger)
        finally:
            await ledger.close()
    finally:
        await store.close()


def _history_runs(url: str, timeout: float | None, output: str) -> None:
    """``history --runs``: the runs, oldest first."""
    from ..ops.ledger_documents import runs_json, runs_records
    from ..ops.text_output import RUNS_COLUMNS

    shown_url, runs = _run(_read_ledger(url, timeout, lambda ledger: ledger.runs()))
    _show(output, _Listing(
        f"Runs recorded in {shown_url}", len(runs),
        lambda: runs_json(shown_url, runs), lambda: runs_records(runs),
        {"command": "history --runs", "url": shown_url, "runs": len(runs)},
        RUNS_COLUMNS,
        ("run id", "kind", "started (UTC)", "finished (UTC)", "host", "written", "removed",
         "undone", "kept"),
        lambda: [(run.run_id, run.kind.value if run.undoes is None else f"undo of {run.undoes}",
                  _when(run.started_at), _when(run.finished_at), run.host, str(run.written),
                  str(run.removed), str(run.undone), "" if run.kept is None else str(run.kept))
                 for run in runs]))
