"""The heal ledger's table: one row per heal written, whoever wrote it.

The table is created and upgraded by this package's Alembic migrations
(``migrations/`` in the repository, ``adk_session_heal/_migrations`` in an
installed wheel; see :mod:`adk_session_heal.migrate`), which record their
revision in a version table of their own, so a host application's Alembic
history is untouched. This definition is what the code reads and writes; the
migrations are frozen copies of its revisions.

The uniqueness rule ``(app_name, user_id, session_id, synthetic_event_id)``
makes recording idempotent and, since a heal's id is deterministic, also
records at most one heal per call event and attempt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    Double,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    inspect,
    text,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from ..heal_record import HealRecord, HealTrigger
from .dialects import insert_new_rows

if TYPE_CHECKING:
    from .base import Removal

__all__ = [
    "HEAL_LEDGER_REVISIONS",
    "LEDGER_HEAD_REVISION",
    "LEDGER_TABLE",
    "LEDGER_TABLE_NAME",
    "LEDGER_VERSION_TABLE",
    "REMOVALS_REVISIONS",
    "REMOVALS_TABLE",
    "TOOL_RUNS_REVISIONS",
    "insert_ledger_rows",
    "ledger_row",
    "read_ledger_revision",
    "record_from_row",
    "removal_from_row",
    "removal_row",
]

LEDGER_TABLE_NAME = "adk_session_heal_ledger"
"""Name of the ledger table."""

LEDGER_VERSION_TABLE = "adk_session_heal_alembic_version"

"""Name of the table where this package's migrations keep their revision."""

LEDGER_HEAD_REVISION = "0003"
"""The newest ledger migration, known without loading Alembic (a test pins it to the scripts')."""

HEAL_LEDGER_REVISIONS = frozenset({"0001", "0002", "0003"})
"""Revisions at which the heal ledger table is the one this code reads and writes.

``0002`` added the tool-run table and ``0003`` the removals table, both
leaving the heal ledger as ``0001`` made it, so a database not yet upgraded
keeps recording heals."""

TOOL_RUNS_REVISIONS = frozenset({"0002", "0003"})
"""Revisions at which the tool-run table (:mod:`.tool_runs`) exists as this code uses it."""

REMOVALS_REVISIONS = frozenset({"0003"})
"""Revisions at which the removals table (:data:`REMOVALS_TABLE`) exists."""

_KEY = 128  # ADK's DEFAULT_MAX_KEY_LENGTH
_metadata = MetaData()

LEDGER_TABLE = Table(
    LEDGER_TABLE_NAME,
    _metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("app_name", String(_KEY), nullable=False),
    Column("user_id", String(_KEY), nullable=False),
    Column("session_id", String(_KEY), nullable=False),
    Column("synthetic_event_id", String(_KEY), nullable=False),
    Column("call_event_id", String(_KEY), nullable=False),
    Column("invocation_id", String(256), nullable=False),
    Column("call_ids", Text, nullable=False),
    Column("tool_names", Text, nullable=False),
    Column("reason", String(32), nullable=False),
    Column("trigger", String(32), nullable=False),
    Column("healed_at", Double, nullable=False),
    UniqueConstraint(
        "app_name", "user_id", "session_id", "synthetic_event_id",
        name="uq_adk_session_heal_ledger_heal",
    ),
)
"""The ledger table (revision ``0001``)."""

REMOVALS_TABLE = Table(
    "adk_session_heal_removals",
    _metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("app_name", String(_KEY), nullable=False),
    Column("user_id", String(_KEY), nullable=False),
    Column("session_id", String(_KEY), nullable=False),
    Column("synthetic_event_id", String(_KEY), nullable=False),
    Column("call_event_id", String(_KEY), nullable=False),
    Column("call_ids", Text, nullable=False),
    Column("reason", String(32), nullable=False),
    Column("removed_by", String(256), nullable=False),
    Column("removed_at", Double, nullable=False),
    Column("detail", Text, nullable=False),
)
"""The removals table (revision ``0003``): one row per heal taken back out."""

_LEDGER_KEY = ("app_name", "user_id", "session_id", "synthetic_event_id")


def ledger_row(record: HealRecord) -> dict[str, Any]:
    """Returns the ledger row of one heal (without the surrogate ``id``)."""
    return {
        "app_name": record.app_name,
        "user_id": record.user_id,
        "session_id": record.session_id,
        "synthetic_event_id": record.synthetic_event_id,
        "call_event_id": record.call_event_id,
        "invocation_id": record.invocation_id,
        "call_ids": json.dumps(list(record.call_ids)),
        "tool_names": json.dumps(list(record.tool_names)),
        "reason": record.reason,
        "trigger": record.trigger.value,
        "healed_at": record.healed_at,
    }


def removal_row(removal: Removal) -> dict[str, Any]:
    """Returns the removals-table row recording one heal taken out (without ``id``)."""
    return {
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


def removal_from_row(row: Any) -> Removal:
    """Returns the :class:`~adk_session_heal.store.base.Removal` a removals row records."""
    from ..session_key import SessionKey
    from .base import Removal, RemovalReason

    return Removal(
        key=SessionKey(row.app_name, row.user_id, row.session_id),
        event_id=row.synthetic_event_id,
        call_event_id=row.call_event_id,
        call_ids=tuple(json.loads(row.call_ids)),
        reason=RemovalReason(row.reason),
        removed_at=float(row.removed_at),
        removed_by=row.removed_by,
        detail=tuple(json.loads(row.detail)),
    )


def record_from_row(row: Any) -> HealRecord:
    """Returns the :class:`HealRecord` a ledger row holds."""
    return HealRecord(
        app_name=row.app_name,
        user_id=row.user_id,
        session_id=row.session_id,
        call_event_id=row.call_event_id,
        synthetic_event_id=row.synthetic_event_id,
        invocation_id=row.invocation_id,
        call_ids=tuple(json.loads(row.call_ids)),
        tool_names=tuple(json.loads(row.tool_names)),
        reason=row.reason,
        trigger=HealTrigger(row.trigger),
        healed_at=float(row.healed_at),
        # Kept by the Redis ledger only; the SQL table has no columns for them yet.
        effects=tuple(json.loads(getattr(row, "effects", None) or "[]")),
        outcomes=tuple(json.loads(getattr(row, "outcomes", None) or "[]")),
    )


async def insert_ledger_rows(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Inserts heal-ledger rows, skipping heals already recorded (any other error is raised).

    Args:
        conn: A connection inside the caller's transaction (the one that wrote
            the heals, so a heal and its record commit together).
        rows: Rows from :func:`~adk_session_heal.store.ledger_table.ledger_row`.
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
