"""The ``adk-session-heal`` command line (private module; the commands are the interface).

Each command parses its options, calls :mod:`adk_session_heal.ops.scan`,
:mod:`adk_session_heal.ops.repair`, :mod:`adk_session_heal.ledger` or
:mod:`adk_session_heal.migrate`, and prints the documents of ``ops``
(:mod:`adk_session_heal.ops.scan_report`, ``repair_report``,
``ledger_documents``, ``migration_report``).

URL: every command that takes one reads ``ADK_SESSION_HEAL_URL`` when it is
omitted (an argument given wins).

Output (``scan``, ``repair``, ``history``): ``--format table`` (the default on
a terminal: rich tables, long ids folded, never cut), ``tsv`` (the default when
stdout is not a terminal: a header line, then one record per line, nothing
truncated, no colour), ``json`` (one document; ``--json`` is short for it) or
``jsonl`` (one record per line, then a summary line). The documents, records
and columns are described in the ``ops`` documents and ``ops.text_output``; each carries
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

Modules: ``exits`` (exit codes, :class:`_Cli`, :func:`_run`), ``options``
(the click options and their callbacks; durations are read with
:func:`~adk_session_heal.core.durations.parse_duration`), ``render`` (tables,
progress bars, JSON, JSONL and TSV), one module per command or command group
(``scan``, ``repair``, ``review``, ``history``, ``db``), and ``demo``. This
module holds the ``main`` group and registers the commands on it as it is
imported.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys

import click

from .db import db_group
from .exits import _Cli
from .history import history_command
from .options import URL_ENV as URL_ENV  # re-exported: the environment variable's name
from .options import _debug_option
from .repair import repair_command
from .review import review_group
from .scan import scan_command


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


main.add_command(scan_command)
main.add_command(repair_command)
main.add_command(review_group)
main.add_command(history_command)
main.add_command(db_group)
