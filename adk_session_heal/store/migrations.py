"""Running this package's Alembic migrations, configured in code.

The migrations live in the repository's top-level ``migrations/`` directory and
ship in the wheel as ``adk_session_heal/_migrations``. No ``alembic.ini`` is
needed: :func:`alembic_config` builds the configuration, and each command runs
on an async engine through ``AsyncConnection.run_sync`` (the Alembic cookbook's
"programmatic API use with asyncio"). Revisions are recorded in
``adk_session_heal_alembic_version``, never in a host application's
``alembic_version``.

Example::

    await upgrade("postgresql+asyncpg://app@db/sessions")   # adk-session-heal db upgrade URL
    await current("postgresql+asyncpg://app@db/sessions")   # -> "0001"
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import inspect, text
from sqlalchemy.exc import SQLAlchemyError

from ..errors import LedgerError
from .driver_errors import translate_error
from .engines import TimeoutArg, Timeouts, create_store_engine
from .ledger_table import LEDGER_VERSION_TABLE
from .urls import StoreUrl, parse_store_url

__all__ = [
    "Revision",
    "alembic_config",
    "current",
    "downgrade",
    "head_revision",
    "migrations_dir",
    "resolve_revision",
    "revisions",
    "sql_script",
    "upgrade",
]


def migrations_dir() -> Path:
    """Returns the migrations directory (installed wheel first, then the checkout)."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(
        "adk-session-heal's migrations directory is missing from this installation"
    )


def alembic_config(connection: Any = None, output: io.StringIO | None = None) -> Config:
    """Returns the Alembic configuration (optionally bound to an open connection).

    Args:
        connection: An open SQLAlchemy connection (online mode).
        output: Where offline mode (``--sql``) writes its SQL.
    """
    config = Config(output_buffer=output)
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("version_table", LEDGER_VERSION_TABLE)
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """Returns the newest revision of the migrations."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


async def _checked_url(url: str | StoreUrl, *, writable: bool, timeout: TimeoutArg) -> StoreUrl:
    from .opening import open_store  # opening imports the adapters, which import this

    store = await open_store(url, writable=writable, timeout=timeout)
    await store.close()
    assert store.url is not None
    return store.url


async def _run(
    url: str | StoreUrl, action: str, revision: str, timeout: TimeoutArg
) -> str | None:
    parsed = url if isinstance(url, StoreUrl) else parse_store_url(url)
    parsed.sqlalchemy_url(writable=True)  # a Redis URL is refused before connecting
    # A named target is checked before connecting; a relative one ("-1") is Alembic's.
    target = None if _RELATIVE.fullmatch(revision) else resolve_revision(revision)
    store_url = await _checked_url(parsed, writable=True, timeout=timeout)
    engine = create_store_engine(store_url, writable=True, timeouts=Timeouts.of(timeout))

    def current_revision(sync_connection: Any) -> str | None:
        context = MigrationContext.configure(
            sync_connection, opts={"version_table": LEDGER_VERSION_TABLE}
        )
        return context.get_current_revision()

    def at_base(sync_connection: Any) -> None:
        # Nothing of ours is left at base, not even Alembic's empty version table (also
        # one an earlier downgrade left), so the `db upgrade --sql` script runs again.
        if inspect(sync_connection).has_table(LEDGER_VERSION_TABLE):
            sync_connection.execute(text(f"DROP TABLE {LEDGER_VERSION_TABLE}"))

    def run(sync_connection: Any) -> str | None:
        if not _RELATIVE.fullmatch(revision):
            # Refused (or found already done) before Alembic creates its version table:
            # DDL commits at once on MySQL, MariaDB and SQLite, even when Alembic then fails.
            before = current_revision(sync_connection)
            if target == before:
                if action == "downgrade" and before is None:
                    at_base(sync_connection)
                return before
            _check_direction(action, revision, before, target)
        config = alembic_config(sync_connection)
        if action == "upgrade":
            command.upgrade(config, revision)
            return current_revision(sync_connection)
        command.downgrade(config, revision)
        now = current_revision(sync_connection)
        if now is None:
            at_base(sync_connection)
        return now

    try:
        async with engine.begin() as conn:
            return await conn.run_sync(run)
    except CommandError as exc:
        raise _revision_error(revision, exc) from exc
    except (SQLAlchemyError, OSError) as exc:
        raise translate_error(exc, store_url, f"migrate ({action})") from exc
    finally:
        await engine.dispose()


async def upgrade(
    url: str | StoreUrl, revision: str = "head", *, timeout: TimeoutArg = None
) -> str | None:
    """Upgrades the heal ledger's tables to ``revision``.

    Args:
        url: An ADK session database (checked like every other command's).
        revision: The target revision (default: the newest).
        timeout: How long to wait for a database server (see
            :func:`~adk_session_heal.store.open_store`).

    Returns:
        The revision now current.

    Raises:
        LedgerError: An unknown revision, or one below the current one.
    """
    return await _run(url, "upgrade", revision, timeout)


async def downgrade(
    url: str | StoreUrl, revision: str, *, timeout: TimeoutArg = None
) -> str | None:
    """Downgrades the heal ledger's tables to ``revision`` (``"base"`` drops them).

    Only this package's own tables change: ``"base"`` drops the ledger table
    (the record of past heals) and then the version table too, unlike
    Alembic's default, so the database is as before the first upgrade (and an
    upgrade script from :func:`sql_script` runs on it). The synthetic events
    already written into the sessions stay where they are.

    Args:
        url: An ADK session database.
        revision: The target revision.
        timeout: How long to wait for a database server.

    Returns:
        The revision now current (``None`` at base).

    Raises:
        LedgerError: An unknown revision, or one above the current one.
    """
    return await _run(url, "downgrade", revision, timeout)


async def current(url: str | StoreUrl, *, timeout: TimeoutArg = None) -> str | None:
    """Returns the heal ledger's current revision (``None``: not installed). Read-only.

    Args:
        url: An ADK session database.
        timeout: How long to wait for a database server.
    """
    from .opening import open_store

    # A Redis store's ledger has no tables to migrate: it reports the head.
    store = await open_store(url, timeout=timeout)
    try:
        return await store.ledger_revision()
    finally:
        await store.close()


@dataclass(frozen=True, slots=True)
class Revision:
    """One migration of the heal ledger's tables.

    Attributes:
        id: The revision id.
        down_revision: The revision it follows (``None`` for the first).
        message: Its one-line description.
        head: It is the newest.
    """

    id: str
    down_revision: str | None
    message: str
    head: bool


def revisions() -> list[Revision]:
    """Returns every migration, newest first (no database needed)."""
    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    found: list[Revision] = []
    for rev in script.walk_revisions():
        down = rev.down_revision
        lines = (rev.doc or "").strip().splitlines()
        found.append(Revision(
            id=rev.revision,
            down_revision=down if isinstance(down, str) else None,
            message=lines[0] if lines else "",
            head=rev.revision == head,
        ))
    return found


def resolve_revision(revision: str) -> str | None:
    """Returns the revision id ``revision`` names; connects to nothing.

    Args:
        revision: ``"head"``, ``"base"``, an id or a unique prefix of one.

    Returns:
        The id (``None`` for ``"base"``).

    Raises:
        LedgerError: No migration has that name (the message lists them).
    """
    script = ScriptDirectory.from_config(alembic_config())
    try:
        found = script.get_revisions(revision)
    except CommandError as exc:
        raise _revision_error(revision, exc) from exc
    ids = [rev.revision for rev in found if isinstance(rev, Script)]
    if len(ids) > 1:
        raise LedgerError(f"revision {revision!r} names {len(ids)} migrations: pass one id")
    return ids[0] if ids else None


def _revision_error(revision: str, exc: CommandError) -> LedgerError:
    """Returns the one-line error for a revision Alembic refused."""
    known = ", ".join(rev.id for rev in revisions())
    reason = " ".join(str(exc).split())
    return LedgerError(
        f"revision {revision!r} refused: {reason} (this release's revisions: {known}; "
        "also head and base; see `adk-session-heal db history`)"
    )


_RELATIVE = re.compile(r".*[+-]\d+")
"""A revision relative to another (``-1``, ``head-1``, ``+2``): resolved by Alembic."""


def _check_direction(action: str, asked: str, start: str | None, end: str | None) -> None:
    """Refuses an upgrade that goes down or a downgrade that goes up (linear history)."""
    order = [None, *(rev.id for rev in reversed(revisions()))]  # oldest first
    if start not in order:
        raise LedgerError(
            f"the heal ledger is at revision {start!r}, which this release does not know "
            f"(its revisions: {', '.join(str(r) for r in order[1:])}): a newer "
            "adk-session-heal created it; run `db` commands with that release"
        )
    first, last = order.index(start), order.index(end)
    if (last < first) if action == "upgrade" else (last > first):
        other = "downgrade" if action == "upgrade" else "upgrade"
        raise LedgerError(
            f"revision {asked!r}: {action} from {start or 'base'} to {end or 'base'} goes the "
            f"wrong way: use `db {other}`"
        )


def sql_script(url: str | StoreUrl, action: Literal["upgrade", "downgrade"],
               revision: str) -> str:
    """Returns the SQL a migration would run on this URL's engine; connects to nothing.

    Alembic's offline mode, for a DBA who reviews SQL before it runs: an
    upgrade from an empty database (no heal ledger) to ``revision``, or a
    downgrade from the newest revision to ``revision``; ``"FROM:TO"`` names
    both ends explicitly. The SQL includes the version table's rows (a
    downgrade to base drops that table, as :func:`downgrade` does), and, on
    PostgreSQL and SQLite, ``BEGIN`` / ``COMMIT``.

    Args:
        url: A session database URL. Only its form and dialect are used: a
            server is not contacted and a SQLite file not opened (it must
            exist, as for every other command).
        action: ``"upgrade"`` or ``"downgrade"``.
        revision: The target revision (``"head"``, ``"base"``, an id, or
            ``"FROM:TO"``).

    Raises:
        UnsupportedStoreError: The URL is malformed or names no SQL database
            (Redis).
        LedgerError: An unknown revision, or a range that goes the wrong way.
    """
    store_url = url if isinstance(url, StoreUrl) else parse_store_url(url)
    sql_url = store_url.sqlalchemy_url(writable=True)
    start, colon, end = revision.rpartition(":")
    if not colon:
        start = "base" if action == "upgrade" else "head"
    _check_direction(action, revision, resolve_revision(start), resolve_revision(end))
    steps = f"{start}:{end}" if action == "downgrade" else revision
    output = io.StringIO()
    config = alembic_config(output=output)
    config.attributes["offline_url"] = sql_url
    config.attributes["drop_version_table"] = action == "downgrade" and resolve_revision(
        end) is None
    try:
        if action == "upgrade":
            command.upgrade(config, steps, sql=True)
        else:
            command.downgrade(config, steps, sql=True)
    except CommandError as exc:
        raise _revision_error(revision, exc) from exc
    return output.getvalue()
