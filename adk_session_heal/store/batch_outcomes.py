"""A write batch against the sessions as they are now, and its outcomes in batch order.

Every writer re-counts the planned sessions inside its transaction and skips
a session that moved since it was planned (:func:`discount_planned`,
:func:`checked`), then reports one
:class:`~adk_session_heal.store.base.WriteResult` per heal
(:func:`outcomes`); a remover keeps the removals it took out
(:func:`removed`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core.healing import Heal, SessionHeals
from ..core.session_key import SessionKey
from .base import Removal, RemoveOutcome, WriteOutcome, WriteResult

if TYPE_CHECKING:
    from google.adk.events.event import Event


def discount_planned(
    batch: Sequence[SessionHeals],
    counts: dict[SessionKey, int],
    present: Iterable[Sequence[Any]],
) -> dict[SessionKey, int]:
    """Subtracts from ``counts`` the planned heals already stored in their own session.

    Args:
        batch: The planned sessions.
        counts: Events per session, as counted now.
        present: ``(app_name, user_id, session_id, id)`` rows whose id is a
            planned heal's id (in any session of the batch).
    """
    planned = {(s.key, heal.event_id) for s in batch for heal in s.heals}
    for app, user, session, event_id in present:
        key = SessionKey(app, user, session)
        if (key, event_id) in planned:
            counts[key] = counts.get(key, 0) - 1
    return counts


def checked(
    batch: Sequence[SessionHeals], counts: dict[SessionKey, int]
) -> tuple[list[SessionHeals], list[WriteResult]]:
    """Splits a batch into the sessions still as planned and the skipped heals.

    Args:
        batch: The planned sessions.
        counts: Their events now, less planned heals already stored
            (:func:`discount_planned`); a session absent has none.
    """
    live: list[SessionHeals] = []
    skipped: list[WriteResult] = []
    for planned in batch:
        if planned.seen_events is None or counts.get(planned.key, 0) == planned.seen_events:
            live.append(planned)
            continue
        outcome = WriteOutcome.GONE if not counts.get(planned.key) else WriteOutcome.CHANGED
        skipped.extend(WriteResult(heal, outcome) for heal in planned.heals)
    return live, skipped


def outcomes(
    batch: Sequence[SessionHeals],
    skipped: Iterable[WriteResult],
    inserted: Sequence[Heal],
    written: Sequence[bool | None],
    stored: Mapping[str, Event],
) -> list[WriteResult]:
    """Returns one result per heal of ``batch``, in its order.

    Args:
        batch: What was to be written.
        skipped: The results of heals whose session moved (:func:`checked`).
        inserted: The heals the writer tried to insert.
        written: For each of those, whether the insert wrote it (``None``:
            its session was deleted before the insert).
        stored: Events read back for heals already present, by id.
    """
    results = {id(result.heal): result for result in skipped}
    for heal, ok in zip(inserted, written, strict=True):
        outcome = (WriteOutcome.GONE if ok is None
                   else WriteOutcome.WRITTEN if ok else WriteOutcome.PRESENT)
        results[id(heal)] = WriteResult(heal, outcome, stored.get(heal.event_id))
    return [results[id(heal)] for planned in batch for heal in planned.heals]


def removed(batch: Sequence[Removal], results: Sequence[RemoveOutcome]) -> list[Removal]:
    """Returns the removals of ``batch`` whose outcome is :attr:`RemoveOutcome.REMOVED`."""
    return [r for r, outcome in zip(batch, results, strict=True)
            if outcome is RemoveOutcome.REMOVED]
