"""``adk-session-heal db``: upgrade, downgrade and inspect the package's own tables.

Each command runs the ledger's Alembic migrations, or (``--sql``) prints their
SQL for the URL's engine without connecting; ``--json`` prints one document.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from ..errors import HealError
from .exits import CliError, _run
from .options import URL_ENV, _debug_option, _json_flag, _timeout, _url_argument
from .render import _print_json

if TYPE_CHECKING:
    from ..store.urls import StoreUrl

F = TypeVar("F", bound=Callable[..., Any])


@click.group("db")
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
