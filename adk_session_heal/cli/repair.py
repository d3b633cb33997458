"""``adk-session-heal repair``: heal the dead calls, or (``--undo RUN_ID``) take a run back.

Without ``--yes`` it shows its plan and asks on the terminal; off a terminal it
refuses to write. Heals are recorded in the ledger unless ``--no-ledger``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from ..policy import DEFAULT_BATCH_SIZE
from .exits import _WITHOUT_LEDGER, EXIT_SKIPPED, CliError, _run
from .options import (
    _output_format,
    _scan_options,
    _timeout,
    _url_argument,
    _url_in_hint,
)
from .render import (
    _Bar,
    _console,
    _print_repair_tables,
    _print_report,
    _progress,
    _scan_bar,
    _table,
)

if TYPE_CHECKING:
    from ..core.heal_record import HealRecord
    from ..ops.scan import RepairPlan, ScanOptions
    from ..store.engines import TimeoutArg


@click.command("repair")
@_url_argument
@_scan_options
@click.option("--dry-run", is_flag=True, help="Print exactly what would be written; write nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--no-ledger", is_flag=True, help="Do not record heals in the heal ledger.")
@click.option("--batch-size", default=DEFAULT_BATCH_SIZE, show_default=True, type=click.IntRange(1),
              help="Synthetic events per transaction.")
@click.option("--undo", "undo_run", metavar="RUN_ID",
              help="Take back the heals repair run RUN_ID wrote (history --runs lists runs).")
@_timeout
@_output_format
def repair_command(url: str, options: ScanOptions, dry_run: bool, yes: bool, no_ledger: bool,
                   batch_size: int, undo_run: str | None, output: str) -> None:
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
    from ..ops.apply import apply_plan
    from ..ops.repair_report import RepairReport
    from ..ops.scan import plan_repair
    from ..ops.text_output import REPAIR_COLUMNS, counted
    from ..store import SessionFilter
    if not dry_run and not yes and not sys.stdin.isatty():
        raise CliError("repair writes to the database: pass --yes to confirm "
                       "(or --dry-run to see what it would write)")
    if undo_run is not None:
        if (no_ledger or options.where != SessionFilter() or options.incremental
                or options.since is not None):
            raise CliError("--undo takes back a whole run, recorded in the ledger: it goes "
                           "with neither --no-ledger nor --app/--user/--session/--shard/"
                           "--incremental/--since")
        _undo(url, undo_run, dry_run=dry_run, yes=yes, batch_size=batch_size,
              timeout=options.timeout, output=output)
        return
    click.get_current_context().meta[_WITHOUT_LEDGER] = "repair"
    with _progress(output) as progress:
        plan: RepairPlan = _run(plan_repair(url, options, progress=_scan_bar(progress),
                                            writing=not dry_run, ledger=not no_ledger))
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
                                     on_heal=on_heal))
    if output == "table":
        _print_repair_tables(_console(), report, undo_hint=(
            None if report.run_id is None else f"Run {report.run_id}: `adk-session-heal "
            f"repair{_url_in_hint(url)} --undo {report.run_id}` takes it back."))
    else:
        _print_report(output, report, REPAIR_COLUMNS, first=report.scan.summary_line())
    sys.exit(EXIT_SKIPPED if report.skipped or report.scan.damaged_rows or report.kept_back
             else 0)


def _undo(url: str, run_id: str, *, dry_run: bool, yes: bool, batch_size: int,
          timeout: TimeoutArg, output: str) -> None:
    """``repair --undo``: shows the plan, asks (on a terminal, without --yes), undoes, prints."""
    from ..ops.text_output import counted
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
        _print_report(output, report, UNDO_COLUMNS)
    sys.exit(EXIT_SKIPPED if report.count(RemoveOutcome.KEPT) else 0)
