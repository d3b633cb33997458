"""The heal ledger's table: one row per heal written, whoever wrote it.

The table is created and upgraded by this package's Alembic migrations
(``alembic/`` beside this module; see :mod:`adk_session_heal.migrate`), which record their
revision in a version table of their own, so a host application's Alembic
history is untouched. This definition is what the code reads and writes; the
migrations are frozen copies of its revisions.

The uniqueness rule ``(app_name, user_id, session_id, synthetic_event_id,
run_id)`` makes recording idempotent and, since a heal's id is deterministic,
also records at most one heal per call event, attempt and repair run. (Before
revision ``0004`` the rule had no ``run_id``: a heal undone by
``repair --undo`` and written again by a later run is a second write of the
same id, recorded under its own run.)

Revision ``0004`` adds repair runs (:mod:`adk_session_heal.ops.undo`): the
``adk_session_heal_runs`` table (:data:`RUNS_TABLE`: one row per ``repair`` or
``repair --undo`` run: id, kind, host, start and end), each heal row's
``run_id`` (``""`` for the wrapper's heals, which belong to no run) and
``event_digest`` (:func:`~adk_session_heal.core.healing.event_digest` of the row
the run stored, so an undo takes out only rows still exactly as written), and
each removal row's ``run_id``.

Revision ``0005`` adds the state of incremental scans
(:mod:`adk_session_heal.store.incremental`): each scope's watermark
(:data:`WATERMARKS_TABLE`) and the sessions its last run left unsettled
(:data:`UNSETTLED_TABLE`).

Revision ``0006`` adds the record of each operator's resolution
(:data:`RESOLUTIONS_TABLE`: who, when, what), kept also once a later
resolution has superseded it and taken its event out of the session.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    Double,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    inspect,
    text,
)
from sqlalchemy.dialects import mysql

from ...core.event_access import HEAL_METADATA_KEY
from ...core.heal_record import HealRecord, ResolutionRecord
from ...core.healing import event_digest
from ..dialects import insert_new_rows
from ..incremental import UNSETTLED_TABLE_NAME, WATERMARKS_TABLE_NAME
from .revisions import Feature, has

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from ...core.healing import Heal
    from ...core.session_key import SessionKey
    from ..base import Removal

LEDGER_TABLE_NAME = "adk_session_heal_ledger"
"""Name of the ledger table."""

LEDGER_VERSION_TABLE = "adk_session_heal_alembic_version"

"""Name of the table where this package's migrations keep their revision."""

_KEY = 128  # ADK's DEFAULT_MAX_KEY_LENGTH
_RUN_ID = 32  # a run id: 32 hex digits (repair_runs.new_run_id)
_SCOPE_ID = 40  # an incremental scope's id: a SHA-1 in hex (incremental.scope_id)
_metadata = MetaData()


def _heal_row_columns() -> list[Column[Any]]:
    """The columns every table of heal rows starts with (new objects for each table): a
    surrogate id, the session, the heal's event and the call event it answers."""
    return [
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("app_name", String(_KEY), nullable=False),
        Column("user_id", String(_KEY), nullable=False),
        Column("session_id", String(_KEY), nullable=False),
        Column("synthetic_event_id", String(_KEY), nullable=False),
        Column("call_event_id", String(_KEY), nullable=False),
    ]


LEDGER_TABLE = Table(
    LEDGER_TABLE_NAME,
    _metadata,
    *_heal_row_columns(),
    Column("invocation_id", String(256), nullable=False),
    Column("call_ids", Text, nullable=False),
    Column("tool_names", Text, nullable=False),
    Column("reason", String(32), nullable=False),
    Column("trigger", String(32), nullable=False),
    Column("healed_at", Double, nullable=False),
    Column("run_id", String(_RUN_ID), nullable=False, server_default=""),
    Column("event_digest", String(64), nullable=True),
    UniqueConstraint(
        "app_name", "user_id", "session_id", "synthetic_event_id", "run_id",
        name="uq_adk_session_heal_ledger_run_heal",
    ),
)
"""The ledger table (revision ``0004``; ``run_id`` and ``event_digest`` are ``0004``'s)."""

REMOVALS_TABLE = Table(
    "adk_session_heal_removals",
    _metadata,
    *_heal_row_columns(),
    Column("call_ids", Text, nullable=False),
    Column("reason", String(32), nullable=False),
    Column("removed_by", String(256), nullable=False),
    Column("removed_at", Double, nullable=False),
    Column("detail", Text, nullable=False),
    Column("run_id", String(_RUN_ID), nullable=True),
)
"""The removals table (revision ``0003``; ``run_id``, the run that took it out, is ``0004``'s).

One row per heal taken back out. An undo's row (reason ``undo``) names the
undone run in ``detail``."""

RUNS_TABLE = Table(
    "adk_session_heal_runs",
    _metadata,
    Column("run_id", String(_RUN_ID), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("undoes", String(_RUN_ID), nullable=True),
    Column("host", String(256), nullable=False),
    Column("started_at", Double, nullable=False),
    Column("finished_at", Double, nullable=True),
    Column("kept", Integer, nullable=True),
)
"""The runs table (revision ``0004``): one row per ``repair`` or ``repair --undo`` run.

``finished_at`` is ``NULL`` until the run ends (a run killed midway keeps it
so); ``kept`` counts the rows an undo left in place. What a run wrote and took
out is counted from its heal and removal rows, which commit with the rows
themselves."""

WATERMARKS_TABLE = Table(
    WATERMARKS_TABLE_NAME,
    _metadata,
    Column("scope_id", String(_SCOPE_ID), primary_key=True),
    Column("scope", Text, nullable=False),
    Column("watermark", Double, nullable=False),
    Column("run_at", Double, nullable=False),
)
"""The watermarks table (revision ``0005``): one row per incremental scope.

``watermark`` is in column seconds (:mod:`adk_session_heal.store.incremental`);
``run_at`` is the clock of the run that recorded it."""

UNSETTLED_TABLE = Table(
    UNSETTLED_TABLE_NAME,
    _metadata,
    Column("scope_id", String(_SCOPE_ID), primary_key=True),
    Column("app_name", String(_KEY), primary_key=True),
    Column("user_id", String(_KEY), primary_key=True),
    Column("session_id", String(_KEY), primary_key=True),
)
"""The unsettled table (revision ``0005``): the sessions a scope's last run left unsettled."""

RESOLUTIONS_TABLE = Table(
    "adk_session_heal_resolutions",
    _metadata,
    *_heal_row_columns(),
    Column("call_id", Text, nullable=False),
    Column("supersedes", String(_KEY), nullable=False),
    Column("resolved_by", String(256), nullable=False),
    Column("resolved_at", Double, nullable=False),
    Column("response", Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb"),
           nullable=False),
    UniqueConstraint("app_name", "user_id", "session_id", "synthetic_event_id",
                     name="uq_adk_session_heal_resolutions_event"),
)
"""The resolutions table (revision ``0006``): one row per operator's resolution.

``response`` is the resolved call's true response as JSON (``LONGTEXT`` on
MySQL/MariaDB, whose ``TEXT`` holds 64 KB); ``supersedes`` the heal or earlier
resolution it took out."""

Index("ix_adk_session_heal_resolutions_session", RESOLUTIONS_TABLE.c.app_name,
      RESOLUTIONS_TABLE.c.user_id, RESOLUTIONS_TABLE.c.session_id)

def unsettle_sql(dialect: str) -> str:
    """Returns the statement marking a session unsettled for every incremental scope (``0005``).

    A heal taken out (``repair --undo``) reopens its call without a write ADK
    would date, so the session's removal transaction runs this, and the next
    incremental run of every scope reads it again. Parameters:
    :func:`unsettle_params`.

    Args:
        dialect: SQLAlchemy's dialect name (PostgreSQL needs the parameters typed).
    """
    a, u, s = ((f"CAST(:{n} AS TEXT)" for n in ("app_name", "user_id", "session_id"))
               if dialect == "postgresql" else (":app_name", ":user_id", ":session_id"))
    return (f"INSERT INTO {UNSETTLED_TABLE_NAME} (scope_id, app_name, user_id, session_id) "
            f"SELECT w.scope_id, {a}, {u}, {s} FROM {WATERMARKS_TABLE_NAME} w "
            f"WHERE NOT EXISTS (SELECT 1 FROM {UNSETTLED_TABLE_NAME} x WHERE x.scope_id = "
            f"w.scope_id AND x.app_name = {a} AND x.user_id = {u} AND x.session_id = {s})")


def unsettle_params(key: SessionKey) -> dict[str, str]:
    """Returns :func:`unsettle_sql`'s parameters for one session."""
    return {"app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id}


_RUN_COLUMNS = frozenset({"run_id", "event_digest"})


def base_columns(table: Table, revision: str | None) -> list[Column[Any]]:
    """Returns ``table``'s columns that exist at ``revision`` (``0004``'s only from ``0004``)."""
    if has(revision, Feature.RUNS):
        return list(table.columns)
    return [c for c in table.columns if c.name not in _RUN_COLUMNS]

_LEDGER_KEY = ("app_name", "user_id", "session_id", "synthetic_event_id")
RESOLUTION_KEY = ("app_name", "user_id", "session_id", "synthetic_event_id")
"""The resolutions table's unique key."""


def heal_ledger_row(heal: Heal, stored: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Returns the ledger row of a heal a writer stored, with the digest of what it stored.

    Args:
        heal: The heal written.
        stored: The JSON object the writer stored for it, when that is not
            :attr:`~adk_session_heal.core.healing.Heal.data` (Redis stores the
            ``Event``'s full dump). Only digested for a run's heal.
    """
    row = _row(heal.record_json, _LEDGER_COLUMNS)
    if heal.record.run_id is not None:
        row["event_digest"] = event_digest(heal.data if stored is None else stored)
    return row


_LEDGER_COLUMNS = ("app_name", "user_id", "session_id", "synthetic_event_id", "call_event_id",
                   "invocation_id", "call_ids", "tool_names", "reason", "trigger", "healed_at")
"""The fields of :meth:`HealRecord.to_json` the ledger table has a column for."""
_JSON_TEXT = frozenset({"call_ids", "tool_names", "effects", "outcomes"})
"""The record's lists, kept as JSON text in a ledger row."""


def _json_text(values: list[Any]) -> str:
    """Returns ``json.dumps(values)`` of one of a record's lists.

    Joined by hand when every item is a string ``json.dumps`` writes as it is
    (printable ASCII, no quote, no backslash), as ids and names almost always
    are: a repair writes four of these per heal.
    """
    if values and all(type(v) is str and v.isascii() and v.isprintable() and '"' not in v
                      and "\\" not in v for v in values):
        return '["' + '", "'.join(values) + '"]'
    return json.dumps(values)


def ledger_row(record: HealRecord, *, with_effects: bool = False) -> dict[str, Any]:
    """Returns the ledger row of one heal (without the surrogate ``id``).

    The record's own encoding (:meth:`HealRecord.to_json`), its lists as JSON
    text. ``run_id`` is there only for a run's heal, so the wrapper's rows fit
    any revision's table.

    Args:
        record: The heal's record.
        with_effects: Also each call's effect and outcome (the Redis ledger
            keeps them; the SQL table has no columns for them).
    """
    columns = (*_LEDGER_COLUMNS, "effects", "outcomes") if with_effects else _LEDGER_COLUMNS
    return _row(record.to_json(), columns)


def _row(data: Mapping[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """The ledger row of a record's encoding ``data``: ``columns``, and a run's ``run_id``."""
    row = {key: _json_text(data[key]) if key in _JSON_TEXT else data[key] for key in columns}
    if data["run_id"] is not None:
        row["run_id"] = data["run_id"]
    return row


def removal_row(removal: Removal) -> dict[str, Any]:
    """Returns the removals-table row recording one heal taken out (without ``id``).

    ``run_id`` is there only for a run's removal, so other rows fit revision ``0003``.
    """
    row = {
        "app_name": removal.key.app_name,
        "user_id": removal.key.user_id,
        "session_id": removal.key.session_id,
        "synthetic_event_id": removal.event_id,
        "call_event_id": removal.call_event_id,
        "call_ids": json.dumps(list(removal.call_ids)),
        "reason": removal.reason.value,
        "removed_by": removal.removed_by[:256],
        "removed_at": removal.removed_at,
        "detail": json.dumps(list(removal.detail)),
    }
    if removal.run_id is not None:
        row["run_id"] = removal.run_id
    return row


def resolution_row(resolution: Heal, removal: Removal) -> dict[str, Any]:
    """Returns the resolutions-table row of an operator's resolution (without ``id``).

    Args:
        resolution: The resolution written (its :attr:`~.Heal.resolved_call`
            and :attr:`~.Heal.resolved_by` set).
        removal: The removal of the answer it supersedes.
    """
    data = resolution.data
    call_id = resolution.resolved_call or ""
    response: Any = next(
        (part["function_response"].get("response") for part in data["content"]["parts"]
         if part["function_response"].get("id") == call_id), {})
    return {
        "app_name": resolution.key.app_name,
        "user_id": resolution.key.user_id,
        "session_id": resolution.key.session_id,
        "synthetic_event_id": resolution.event_id,
        "call_event_id": data["custom_metadata"][HEAL_METADATA_KEY]["call_event_id"],
        "call_id": call_id,
        "supersedes": removal.event_id,
        "resolved_by": (resolution.resolved_by or "")[:256],
        "resolved_at": resolution.healed_at,
        "response": json.dumps(response, ensure_ascii=False, sort_keys=True),
    }


def resolution_from_row(row: Any) -> ResolutionRecord:
    """Returns the :class:`~adk_session_heal.core.heal_record.ResolutionRecord` a row holds."""
    return ResolutionRecord(
        app_name=row.app_name, user_id=row.user_id, session_id=row.session_id,
        synthetic_event_id=row.synthetic_event_id, call_event_id=row.call_event_id,
        call_id=row.call_id, supersedes=row.supersedes, resolved_by=row.resolved_by,
        resolved_at=float(row.resolved_at), response=json.loads(row.response))


def removal_from_row(row: Any) -> Removal:
    """Returns the :class:`~adk_session_heal.store.base.Removal` a removals row records."""
    from ...core.session_key import SessionKey
    from ..base import Removal, RemovalReason

    return Removal(
        key=SessionKey(row.app_name, row.user_id, row.session_id),
        event_id=row.synthetic_event_id,
        call_event_id=row.call_event_id,
        call_ids=tuple(json.loads(row.call_ids)),
        reason=RemovalReason(row.reason),
        removed_at=float(row.removed_at),
        removed_by=row.removed_by,
        detail=tuple(json.loads(row.detail)),
        run_id=getattr(row, "run_id", None) or None,
    )


def record_from_row(row: Any) -> HealRecord:
    """Returns the :class:`HealRecord` a ledger row holds (a SQL row, or a Redis hash's)."""
    fields: Mapping[str, Any] = row._mapping if hasattr(row, "_mapping") else vars(row)
    # effects and outcomes: kept by the Redis ledger only; the SQL table has no columns yet.
    return HealRecord.from_json({
        key: json.loads(value or "[]") if key in _JSON_TEXT else value
        for key, value in fields.items()})


async def insert_ledger_rows(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Inserts heal-ledger rows, skipping heals already recorded (any other error is raised).

    Args:
        conn: A connection inside the caller's transaction (the one that wrote
            the heals, so a heal and its record commit together).
        rows: Rows from :func:`~adk_session_heal.store.ledger.heal_table.ledger_row`.
    """
    await insert_new_rows(conn, LEDGER_TABLE, rows, _LEDGER_KEY)


async def read_ledger_revision(conn: AsyncConnection) -> str | None:
    """Returns the heal ledger's migration revision over ``conn`` (``None``: absent)."""
    tables = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
    if LEDGER_TABLE_NAME not in tables or LEDGER_VERSION_TABLE not in tables:
        return None
    result = await conn.execute(text(f"SELECT version_num FROM {LEDGER_VERSION_TABLE}"))
    value = result.scalar_one_or_none()
    return str(value) if value is not None else None
