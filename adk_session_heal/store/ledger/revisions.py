"""The heal ledger's migration revisions, in order, and the feature each one added.

Every check of "is this database's ledger new enough for X" is :func:`has` or
:func:`require` with a :class:`Feature`; no other module lists revisions. A
revision has every feature of the revisions before it, so the order of
:data:`REVISIONS` is the whole rule. Adding a migration: add its revision at
the end, and a :class:`Feature` member if it adds something a reader checks
for (``tests/store/test_migrations.py`` pins the list to the Alembic scripts).
"""

from __future__ import annotations

import enum

from ...errors import LedgerError

REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006")
"""The ledger's revisions, oldest first."""

LEDGER_HEAD_REVISION = REVISIONS[-1]
"""The newest ledger migration, known without loading Alembic."""

_RANK = {revision: rank for rank, revision in enumerate(REVISIONS)}


class Feature(enum.Enum):
    """What a revision added, by the revision that added it."""

    HEALS = "0001"
    """The heal ledger table. ``0002`` and ``0003`` left it as it was, and ``0004``
    added columns the wrapper's rows leave at their defaults: a database not yet
    upgraded keeps recording the wrapper's heals."""
    TOOL_RUNS = "0002"
    """The tool-run table."""
    REMOVALS = "0003"
    """The removals table (heals taken back)."""
    RUNS = "0004"
    """Repair runs: the runs table, the ``run_id`` and ``event_digest`` columns."""
    INCREMENTAL = "0005"
    """The state of incremental runs: the watermarks and unsettled tables."""
    RESOLUTIONS = "0006"
    """Operators' resolutions."""


def has(revision: str | None, feature: Feature) -> bool:
    """Whether a ledger at ``revision`` (``None``: not installed) has ``feature``."""
    rank = _RANK.get(revision) if revision is not None else None
    return rank is not None and rank >= _RANK[feature.value]


def missing_ledger_message(url: object, revision: str | None) -> str:
    """Returns the one-line error for a missing or outdated ledger."""
    if revision is None:
        return f"no heal ledger in {url}: run `adk-session-heal db upgrade {url}` once to create it"
    return (
        f"the heal ledger in {url} is at revision {revision!r}, not {LEDGER_HEAD_REVISION!r}: "
        f"run `adk-session-heal db upgrade {url}`"
    )


def require(where: object, revision: str | None, feature: Feature) -> str:
    """Returns ``revision`` when it has ``feature``.

    Args:
        where: The store or database, as the error names it.
        revision: The ledger's revision (``None``: not installed).
        feature: What the caller is about to use.

    Raises:
        LedgerError: The ledger is missing or older (one line: run ``db upgrade``).
    """
    if revision is None or not has(revision, feature):
        raise LedgerError(missing_ledger_message(where, revision), missing=True)
    return revision
