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
    _output_format,
    _scan_options,
    _selection_in_hint,
    _timeout,
    _url_argument,
    _url_in_hint,
)
from .render import (
    _console,
    _note,
    _print_report,
    _print_scan_tables,
    _progress,
    _scan_bar,
)

if TYPE_CHECKING:
    from ..ops.scan import ScanOptions


@click.command("scan")
@_url_argument
@_scan_options
@_timeout
@_output_format
def scan_command(url: str, options: ScanOptions, output: str) -> None:
    """Report dead tool calls, and the in-flight and pending ones, read-only.

    Exit 0: nothing to heal; 1: something needs healing (wins over 3); 2: bad
    input or environment (one line on stderr); 3: nothing to heal, but sessions
    with damaged rows were skipped (listed with their event ids).

    Example: adk-session-heal scan sqlite:///.adk/session.db --older-than 1h
    """
    from ..ops.scan import scan
    from ..ops.text_output import SCAN_COLUMNS
    with _progress(output) as progress:
        report = _run(scan(url, options, progress=_scan_bar(progress)))
    if output == "table":
        _print_scan_tables(_console(), report)
    else:
        _print_report(output, report, SCAN_COLUMNS)
    if report.needs_healing:
        _note(output, f"Run `adk-session-heal repair{_url_in_hint(url)}{_selection_in_hint()}` "
              "to heal them "
              "(--dry-run shows what it would write).")
    sys.exit(EXIT_NEEDS_HEALING if report.needs_healing
             else EXIT_SKIPPED if report.damaged_rows else 0)
