"""``adk-session-heal history``: what the heal ledger recorded, heal by heal or run by run.

Both lists are read through the store's heal ledger (SQL or Redis), after the
URL is checked as every other command checks it; ``--runs`` lists the runs
that ``repair --undo RUN_ID`` takes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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
    summary = f"Heals recorded in {shown_url}: {len(records)}"
    if output != "table":
        _print_data(output, [summary], lambda: history_json(shown_url, records),
                    lambda: history_records(records),
                    {"command": "history", "url": shown_url, "heals_recorded": len(records)},
                    HISTORY_COLUMNS)
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
    summary = f"Runs recorded in {shown_url}: {len(runs)}"
    if output != "table":
        _print_data(output, [summary], lambda: runs_json(shown_url, runs),
                    lambda: runs_records(runs),
                    {"command": "history --runs", "url": shown_url, "runs": len(runs)},
                    RUNS_COLUMNS)
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
