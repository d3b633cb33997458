"""``adk-session-heal review``: list the healed calls a person should check, and resolve them.

``review [URL]`` (``review list``) is read-only; ``review resolve CALL_ID``
writes a call's true outcome as its response, recorded in the ledger.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from ..policy import DEFAULT_RECONCILE_TIMEOUT
from .exits import _WITHOUT_LEDGER, CliError, _run
from .options import (
    _filters,
    _json_flag,
    _older_than,
    _output_format,
    _reconcile,
    _timeout,
    _url_argument,
    _url_in_hint,
)
from .render import _age, _console, _note, _print_json, _print_report, _table

if TYPE_CHECKING:
    from ..policy import HealPolicy


class _ReviewGroup(click.Group):
    """``review [URL]`` lists; ``review resolve CALL_ID ...`` resolves."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Routes anything but a subcommand name or ``--help`` to ``review list``."""
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["list", *args]
        return super().parse_args(ctx, args)


@click.group("review", cls=_ReviewGroup)
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
@_reconcile
@_timeout
@_output_format
def review_list_command(url: str, app_name: str | None, user_id: str | None,
                        session_id: str | None, older_than: float, clock_skew: float,
                        hooks: HealPolicy | None, timeout: float | None, output: str) -> None:
    """List the calls a person should check (read-only).

    Example: adk-session-heal review sqlite:///.adk/session.db
    """
    from ..ops.operator_review import REVIEW_COLUMNS, review
    from ..store import SessionFilter
    report = _run(review(url, where=SessionFilter(app_name, user_id, session_id),
                         stale_after=older_than, clock_skew=clock_skew, timeout=timeout,
                         reconcile=hooks.reconcile if hooks else None,
                         reconcile_timeout=hooks.reconcile_timeout if hooks
                         else DEFAULT_RECONCILE_TIMEOUT))
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
    else:
        _print_report(output, report, REVIEW_COLUMNS)
    if report.calls:
        _note(output, "Check each in the real system, then record what happened: "
              f"`adk-session-heal review resolve CALL_ID{_url_in_hint(url)} --result JSON` "
              "(or --failed TEXT instead of --result JSON; add --session ID where a call id "
              "is listed in several sessions).")


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
