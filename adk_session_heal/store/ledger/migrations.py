"""Running this package's Alembic migrations, configured in code.

The migration scripts live beside this module, in ``alembic/``, and ship in the
wheel with the package. No ``alembic.ini`` is needed: :func:`alembic_config`
builds the configuration, and each command runs on an async engine through
``AsyncConnection.run_sync`` (the Alembic cookbook's "programmatic API use with
asyncio"). Revisions are recorded in ``adk_session_heal_alembic_version``, never in a
host application's ``alembic_version``.

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
from sqlalchemy import event, inspect, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from ...errors import LedgerError
from ..driver_errors import translate_error
from ..engines import TimeoutArg, Timeouts, create_store_engine
from ..urls import StoreUrl, parse_store_url
from .heal_table import (
    LEDGER_TABLE_NAME,
    LEDGER_VERSION_TABLE,
    REMOVALS_TABLE,
    RESOLUTIONS_TABLE,
    RUNS_TABLE,
    UNSETTLED_TABLE,
    WATERMARKS_TABLE,
)
from .revisions import Feature, has


def migrations_dir() -> Path:
    """Returns the directory of the Alembic scripts, which ships inside the package."""
    return Path(__file__).resolve().parent / "alembic"


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
    from ..opening import open_store  # opening imports the adapters, which import this

    store = await open_store(url, writable=writable, timeout=timeout)
    await store.close()
    assert store.url is not None
    return store.url


def _sqlite_driver_leaves_transactions_to_us(dbapi_connection: Any, _record: object) -> None:
    """Stops Python's sqlite3 from committing around DDL (its legacy transaction control)."""
    dbapi_connection.isolation_level = None


def _sqlite_begin(conn: Any) -> None:
    """Begins each SQLite transaction, taking the write lock at once (DDL included)."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _migration_engine(url: StoreUrl, timeout: TimeoutArg) -> AsyncEngine:
    """Returns the engine a migration runs on: on SQLite, each step is one real transaction.

    Python's ``sqlite3`` (and so ``aiosqlite``) runs DDL outside any
    transaction, so a failed or killed step would keep what it had done;
    SQLAlchemy's documented recipe hands transaction control back to it.
    """
    engine = create_store_engine(url, writable=True, timeouts=Timeouts.of(timeout))
    if url.sqlite_path is not None:
        event.listen(engine.sync_engine, "connect", _sqlite_driver_leaves_transactions_to_us)
        event.listen(engine.sync_engine, "begin", _sqlite_begin)
    return engine


def _step(sync_connection: Any, to: str | None, up: bool) -> None:
    """Runs one revision step in the caller's transaction, its version row included.

    At base nothing of ours is left, not even Alembic's (then empty) version
    table, so the `db upgrade --sql` script runs on the database again.
    """
    config = alembic_config(sync_connection)
    if up:
        command.upgrade(config, to or "base")
    else:
        command.downgrade(config, to or "base")
    if to is None:
        _drop_version_table(sync_connection)


def _drop_version_table(sync_connection: Any) -> None:
    if inspect(sync_connection).has_table(LEDGER_VERSION_TABLE):
        sync_connection.execute(text(f"DROP TABLE {LEDGER_VERSION_TABLE}"))


def _moves(state: _LedgerState, target: str | None) -> list[str | None]:
    """Returns the revisions to step through, in order, from ``state`` to ``target``.

    A step left interrupted (MySQL/MariaDB) is finished first, whatever the
    direction asked: each step is written so that running it again completes it.
    """
    order = _order()
    moves: list[str | None] = []
    start = state.revision
    if state.toward is not None:
        moves.append(state.toward.revision)
        start = state.toward.revision
    first, last = order.index(start), order.index(target)
    way = 1 if last > first else -1
    moves.extend(order[i] for i in range(first + way, last + way, way) if first != last)
    return moves


async def _run(
    url: str | StoreUrl, action: str, revision: str, timeout: TimeoutArg
) -> str | None:
    parsed = url if isinstance(url, StoreUrl) else parse_store_url(url)
    parsed.sqlalchemy_url(writable=True)  # a Redis URL is refused before connecting
    # A named target is checked before connecting; a relative one ("-1") once the current
    # revision is known.
    bare = _RELATIVE.fullmatch(revision) is not None and revision[0] in "+-"
    target = None if bare else resolve_revision(revision)
    store_url = await _checked_url(parsed, writable=True, timeout=timeout)
    engine = _migration_engine(store_url, timeout)
    where = "read the heal ledger's revision in"
    try:
        async with engine.begin() as conn:
            state = await conn.run_sync(_read_state)
            if bare:
                target = _relative(revision, state.revision)
            _check_direction(action, revision, state.revision, target)
            if state.unexplained and action == "upgrade":
                raise LedgerError(state.problem(store_url))
            moves = _moves(state, target)
            if not moves and action == "downgrade" and target is None:
                await conn.run_sync(_drop_version_table)  # one an earlier downgrade left
        now = state.revision
        for to in moves:
            up = _order().index(to) > _order().index(now)
            where = (f"{'upgrade' if up else 'downgrade'} the heal ledger from {now or 'base'} "
                     f"to {to or 'base'} in")
            async with engine.begin() as conn:  # one transaction per step
                await conn.run_sync(_step, to, up)
            now = to
        return now
    except CommandError as exc:
        raise _revision_error(revision, exc) from exc
    except (SQLAlchemyError, OSError) as exc:
        error = translate_error(exc, store_url, where)
        if where.startswith(("upgrade", "downgrade")):
            # SQLite and PostgreSQL rolled the step back; MySQL/MariaDB kept its DDL.
            error = type(error)(f"{error}; " + (
                f"the heal ledger stays at revision {now or 'base'}"
                if engine.dialect.name in _TRANSACTIONAL_DDL else
                "the step is part-done: rerun the command to finish it"))
        raise error from exc
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

    The tables are checked against the revision recorded: a migration step
    interrupted on MySQL or MariaDB (whose DDL commits statement by statement)
    is reported, not hidden behind the revision it started from.

    Args:
        url: An ADK session database.
        timeout: How long to wait for a database server.

    Raises:
        LedgerError: The tables are part-way between two revisions (the
            message names the command that finishes the step), or do not
            match the revision recorded.
    """
    from ..opening import open_store

    store = await open_store(url, timeout=timeout)
    try:
        if store.url is None or store.url.backend == "redis":
            # A Redis store's ledger has no tables to migrate: it reports the head.
            return await store.ledger_revision()
    finally:
        await store.close()
    engine = create_store_engine(store.url, writable=False, timeouts=Timeouts.of(timeout))
    try:
        async with engine.connect() as conn:
            state = await conn.run_sync(_read_state)
    except (SQLAlchemyError, OSError) as exc:
        raise translate_error(exc, store.url, "read the heal ledger's revision in") from exc
    finally:
        await engine.dispose()
    if state.toward is not None or state.unexplained:
        raise LedgerError(state.problem(store.url))
    return state.revision


_TRANSACTIONAL_DDL = frozenset({"sqlite", "postgresql"})
"""Engines whose DDL a transaction rolls back (SQLite through :func:`_migration_engine`)."""

_FEATURES: dict[str, Feature] = {
    LEDGER_TABLE_NAME: Feature.HEALS,
    "adk_session_heal_tool_runs": Feature.TOOL_RUNS,
    REMOVALS_TABLE.name: Feature.REMOVALS,
    RUNS_TABLE.name: Feature.RUNS,
    f"{LEDGER_TABLE_NAME}.run_id": Feature.RUNS,
    f"{LEDGER_TABLE_NAME}.event_digest": Feature.RUNS,
    f"{REMOVALS_TABLE.name}.run_id": Feature.RUNS,
    WATERMARKS_TABLE.name: Feature.INCREMENTAL,
    UNSETTLED_TABLE.name: Feature.INCREMENTAL,
    RESOLUTIONS_TABLE.name: Feature.RESOLUTIONS,
}
"""What ``db current`` checks, each table (or ``table.column``) with the feature that added it.

A migration step's first operation changes one of these (see
:mod:`~adk_session_heal.store.ledger.migration_ops`), so a step killed midway never
looks finished. A new revision's tables and columns are added here."""


def _expected(revision: str | None) -> frozenset[str]:
    return frozenset(name for name, feature in _FEATURES.items() if has(revision, feature))


def _found(sync_connection: Any) -> frozenset[str]:
    inspector = inspect(sync_connection)
    tables = set(inspector.get_table_names())
    found = {name for name in _FEATURES if "." not in name and name in tables}
    for table in {name.partition(".")[0] for name in _FEATURES if "." in name} & tables:
        found |= {f"{table}.{column['name']}" for column in inspector.get_columns(table)
                  if f"{table}.{column['name']}" in _FEATURES}
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class _Toward:
    """The revision an interrupted step was going to."""

    revision: str | None


@dataclass(frozen=True, slots=True)
class _LedgerState:
    """The heal ledger's revision as recorded, and whether its tables agree.

    Attributes:
        revision: The revision in the version table (``None``: none).
        toward: Set when the tables are part-way from ``revision`` to a
            neighbouring revision (a step killed on MySQL/MariaDB).
        missing: What ``revision`` has and the database lacks.
        unexpected: What the database has and ``revision`` lacks.
    """

    revision: str | None
    toward: _Toward | None = None
    missing: frozenset[str] = frozenset()
    unexpected: frozenset[str] = frozenset()

    @property
    def unexplained(self) -> bool:
        """The tables differ from the revision's, and no interrupted step explains it."""
        return self.toward is None and bool(self.missing or self.unexpected)

    def problem(self, url: StoreUrl) -> str:
        """The one-line report of a ledger whose tables do not match its revision."""
        at = self.revision or "base"
        differences = "; ".join(part for part in (
            f"missing {', '.join(sorted(self.missing))}" if self.missing else "",
            f"not expected {', '.join(sorted(self.unexpected))}" if self.unexpected else "",
        ) if part)
        if self.toward is not None:
            to = self.toward.revision
            fix = (f"adk-session-heal db downgrade {url} {to or 'base'} --yes"
                   if _order().index(to) < _order().index(self.revision)
                   else f"adk-session-heal db upgrade {url} --revision {to}")
            return (f"the heal ledger in {url} is part-way from revision {at} to "
                    f"{to or 'base'} (a migration step was interrupted: {differences}): run "
                    f"`{fix}` to finish it")
        return (f"the heal ledger's tables in {url} do not match its revision {at} "
                f"({differences}), and no interrupted migration explains it: `adk-session-heal "
                f"db downgrade {url} base --yes` then `db upgrade {url}` rebuilds them empty")


def _read_state(sync_connection: Any) -> _LedgerState:
    """Reads the recorded revision and checks our tables against it (reads only).

    Args:
        sync_connection: A synchronous SQLAlchemy connection (``run_sync``).
    """
    context = MigrationContext.configure(
        sync_connection, opts={"version_table": LEDGER_VERSION_TABLE})
    revision = context.get_current_revision()
    order = _order()
    if revision not in order:
        return _LedgerState(revision)  # a newer release's: refused where it matters
    found, expected = _found(sync_connection), _expected(revision)
    if found == expected:
        return _LedgerState(revision)
    index = order.index(revision)
    for neighbour in (order[i] for i in (index - 1, index + 1) if 0 <= i < len(order)):
        other = _expected(neighbour)
        if expected & other <= found <= expected | other:
            return _LedgerState(revision, _Toward(neighbour), expected - found, found - expected)
    return _LedgerState(revision, None, expected - found, found - expected)


def _order() -> list[str | None]:
    """Every revision, oldest first, after ``None`` (base)."""
    return [None, *(rev.id for rev in reversed(revisions()))]


def _relative(revision: str, start: str | None) -> str | None:
    """Resolves ``-1``, ``+2``, ``head-1`` or ``0003+1`` against the current revision."""
    match = _RELATIVE.fullmatch(revision)
    assert match is not None
    name, sign, count = match.group(1), match.group(2), int(match.group(3))
    order = _order()
    origin = start if name == "" else resolve_revision(name)
    if origin not in order:
        _check_direction("upgrade", revision, origin, None)  # the one line for a newer release
    index = order.index(origin) + (count if sign == "+" else -count)
    if not 0 <= index < len(order):
        known = ", ".join(str(r) for r in order[1:])
        raise LedgerError(
            f"revision {revision!r} refused: {count} step(s) {'above' if sign == '+' else 'below'}"
            f" {origin or 'base'} is past the {'newest' if sign == '+' else 'first'} revision "
            f"(this release's revisions: {known}; also head and base)")
    return order[index]


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
        revision: ``"head"``, ``"base"``, an id or a unique prefix of one, or
            one of those with steps up or down (``"head-2"``, ``"0003+1"``).
            A bare ``"-1"`` counts from the database's revision: only
            :func:`upgrade` and :func:`downgrade` resolve it.

    Returns:
        The id (``None`` for ``"base"``).

    Raises:
        LedgerError: No migration has that name (the message lists them).
    """
    relative = _RELATIVE.fullmatch(revision)
    if relative is not None and relative.group(1):
        return _relative(revision, None)
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


_RELATIVE = re.compile(r"(.*?)([+-])(\d+)")
"""A revision relative to another (``-1``, ``head-1``, ``+2``): resolved by :func:`_relative`."""


def _check_direction(action: str, asked: str, start: str | None, end: str | None) -> None:
    """Refuses an upgrade that goes down or a downgrade that goes up (linear history)."""
    order = _order()
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
