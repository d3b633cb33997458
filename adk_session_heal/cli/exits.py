"""Exit codes, and the one place the command line turns errors into them.

Every command runs inside :class:`_Cli` (the ``main`` group's class), whose
:meth:`_Cli.invoke` turns a library error into one line on stderr and exit 2,
Ctrl-C into exit 130, and a bug into one line naming its type. Commands run
library coroutines through :func:`_run`, so their errors reach it unchanged.
"""

from __future__ import annotations

import asyncio
import sys
import traceback
from collections.abc import Coroutine
from typing import Any, TypeVar

import click

from ..errors import HealError, LedgerError
from ..store.collector import fewer_collections

T = TypeVar("T")

EXIT_NEEDS_HEALING = 1
"""``scan``: at least one dead call."""
EXIT_BAD_INPUT = 2
"""Bad input or environment: one line on stderr."""
EXIT_SKIPPED = 3
"""``scan`` / ``repair``: done, but damaged or moved sessions were skipped."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT, as shells report it)."""

_DEBUG = "adk_session_heal.debug"
"""``ctx.meta`` key: ``--debug`` was given (before or after the command name)."""

_WITHOUT_LEDGER = "adk_session_heal.without_ledger"
"""``ctx.meta`` key: what the command does without the ledger under ``--no-ledger``
(``"repair"``), named in the hint of a missing-ledger error; unset where it has no such flag."""


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


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a library coroutine (its errors reach :meth:`_Cli.invoke`).

    The garbage collector runs less often meanwhile, output included
    (:func:`~adk_session_heal.store.collector.fewer_collections`).
    """
    with fewer_collections():
        return asyncio.run(coroutine)
