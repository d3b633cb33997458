"""``adk-session-heal scan``: report what needs healing, read-only.

The exit code says what was found (1: something to heal, 3: damaged rows
skipped), and a hint names the ``repair`` command for the same sessions and ages.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from .exits import EXIT_NEEDS_HEALING, EXIT_SKIPPED, _run
from .options import (
    _changed_only,
    _filters,
    _fleet,
    _older_than,
    _output_format,
    _selection_in_hint,
    _timeout,
    _url_argument,
    _url_in_hint,
)
from .render import (
    _console,
    _note,
    _print_json,
    _print_lines,
    _print_scan_tables,
    _progress,
    _scan_bar,
)

if TYPE_CHECKING:
    from ..core.shards import Shard
    from ..ops.scan import PrefilterMode


@click.command("scan")
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
    from ..ops.scan import scan
    from ..ops.text_output import SCAN_COLUMNS
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
