"""The heal ledger of ADK's Redis session store: keys beside ADK's, needing no migration.

The heal ledger is a hash beside ADK's keys, ``adk_session_heal:ledger:{key
prefix}`` (outside the prefix, so ADK's scans never read it): one field per
heal, ``[app, user, session, synthetic event id]`` as JSON (a run's heal: its
run id too, :func:`ledger_field`), holding the ledger row as JSON.
:class:`RedisHealLedger` records into it (the wrapper's ``ledger=``) and reads
it back. Heals taken back out are records pushed on the list
``adk_session_heal:removals:{key prefix}``, operators' resolutions on
``adk_session_heal:resolutions:{key prefix}``, and ``repair`` runs are a hash,
``adk_session_heal:runs:{key prefix}``. The layout
(:class:`~adk_session_heal.store.layouts.redis_sessions.RedisStore`) writes
its records in the same EXEC as the session value they describe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ...core.heal_record import HealRecord, ResolutionRecord
from ...core.session_key import SessionKey
from ...errors import UnsupportedStoreError
from ..redis_clients import as_text
from .heal_table import (
    ledger_row,
    record_from_row,
    removal_from_row,
    removal_row,
    resolution_from_row,
)
from .ledger_base import HealHistory, RedisLedger
from .repair_runs import (
    RepairRun,
    count_ids,
    run_from_row,
    run_row,
    undone_run,
    with_counts,
)
from .revisions import LEDGER_HEAD_REVISION, Feature

if TYPE_CHECKING:
    from ..base import Removal
    from ..incremental import Watermark

LEDGER_KEY_PREFIX = "adk_session_heal:ledger:"
"""The heal ledger's hash is this followed by ADK's key prefix."""

REMOVALS_KEY_PREFIX = "adk_session_heal:removals:"
"""The removals ledger's list is this followed by ADK's key prefix."""

RESOLUTIONS_KEY_PREFIX = "adk_session_heal:resolutions:"
"""The resolutions' list (one record per operator's resolution) is this followed by ADK's
key prefix."""

_NO_UPDATE_TIME = ("Redis keeps no update time: --incremental needs ADK's SQL storage "
                   "(DatabaseSessionService or SqliteSessionService)")
"""Why a Redis ledger keeps no incremental state (the scan refuses such a run first)."""

RUNS_KEY_PREFIX = "adk_session_heal:runs:"
"""The runs' hash (run id -> run row as JSON) is this followed by ADK's key prefix."""


def ledger_field(record: HealRecord) -> str:
    """The heal's field in the ledger hash; a run's heal has its run id too (see ``0004``)."""
    key = [record.app_name, record.user_id, record.session_id, record.synthetic_event_id]
    return json.dumps(key if record.run_id is None else [*key, record.run_id])


class RedisHealLedger(RedisLedger, HealHistory):
    """The heal ledger of a Redis session store: one hash (see the module docstring).

    Pass it as the wrapper's ``ledger=`` (it records after the heal is
    written; ``repair`` records in the heal's own transaction).

    Args:
        client: A ``redis.asyncio`` client.
        key_prefix: ADK's key prefix of the sessions it records.
        owns_client: Close the client on :meth:`close`.
    """

    @property
    def key(self) -> str:
        """The heal ledger's hash for this key prefix."""
        return LEDGER_KEY_PREFIX + self.key_prefix

    async def record(self, records: Sequence[HealRecord]) -> None:
        """Records heals; a heal already recorded keeps its first record."""
        if not records:
            return
        async with self._client.pipeline(transaction=True) as pipe:
            for record in records:
                value = ledger_row(record, with_effects=True)
                pipe.hsetnx(self.key, ledger_field(record), json.dumps(value))
            await pipe.execute()

    @property
    def removals_key(self) -> str:
        """The removals ledger's list for this key prefix."""
        return REMOVALS_KEY_PREFIX + self.key_prefix

    async def record_removals(self, removals: Sequence[Removal]) -> None:
        """Records heals taken back out of storage."""
        if removals:
            await self._client.rpush(self.removals_key,
                                     *(json.dumps(removal_row(r)) for r in removals))

    async def removals(self, *, session_id: str | None = None) -> list[Removal]:
        """Returns the heals taken back out, oldest first (optionally of one session id)."""
        found = [removal_from_row(SimpleNamespace(**json.loads(as_text(value) or "{}")))
                 for value in await self._client.lrange(self.removals_key, 0, -1)]
        return [r for r in found if session_id is None or r.key.session_id == session_id]

    @property
    def resolutions_key(self) -> str:
        """The resolutions' list for this key prefix."""
        return RESOLUTIONS_KEY_PREFIX + self.key_prefix

    async def resolutions(self, *, session_id: str | None = None) -> list[ResolutionRecord]:
        """Returns every operator's resolution, oldest first (optionally of one session id)."""
        found = [resolution_from_row(SimpleNamespace(**json.loads(as_text(value) or "{}")))
                 for value in await self._client.lrange(self.resolutions_key, 0, -1)]
        return [r for r in found if session_id is None or r.session_id == session_id]

    @property
    def runs_key(self) -> str:
        """The runs' hash for this key prefix."""
        return RUNS_KEY_PREFIX + self.key_prefix

    async def check(self, feature: Feature = Feature.HEALS) -> str:
        """The ledger is keys created on first write: always current (see ``ledger_revision``)."""
        return LEDGER_HEAD_REVISION

    async def start_run(self, run: RepairRun) -> None:
        """Records a run as it starts."""
        await self._client.hset(self.runs_key, run.run_id, json.dumps(run_row(run)))

    async def finish_run(self, run_id: str, finished_at: float, *, kept: int | None = None) -> None:
        """Records that a run ended (and, for an undo, the rows it kept)."""
        value = as_text(await self._client.hget(self.runs_key, run_id))
        if value is not None:
            row = {**json.loads(value), "finished_at": finished_at, "kept": kept}
            await self._client.hset(self.runs_key, run_id, json.dumps(row))

    async def watermark(self, scope: str) -> float | None:
        """Redis keeps no update time, so no incremental state: refused.

        Raises:
            UnsupportedStoreError: Always.
        """
        raise UnsupportedStoreError(_NO_UPDATE_TIME)

    async def save_watermark(self, mark: Watermark, now: float) -> None:
        """Redis keeps no update time, so no incremental state: refused.

        Raises:
            UnsupportedStoreError: Always.
        """
        raise UnsupportedStoreError(_NO_UPDATE_TIME)

    async def forget_run(self, run_id: str) -> None:
        """Deletes the record of a run that failed before it wrote anything."""
        await self._client.hdel(self.runs_key, run_id)

    async def _rows(self) -> list[dict[str, Any]]:
        return [json.loads(as_text(value) or "{}")
                for value in (await self._client.hgetall(self.key)).values()]

    async def _removal_rows(self) -> list[dict[str, Any]]:
        return [json.loads(as_text(value) or "{}")
                for value in await self._client.lrange(self.removals_key, 0, -1)]

    async def runs(self, *, run_id: str | None = None) -> list[RepairRun]:
        """Returns the runs, oldest first, counted from their rows (or just ``run_id``'s)."""
        found = [run_from_row(SimpleNamespace(**json.loads(as_text(value) or "{}")))
                 for value in (await self._client.hgetall(self.runs_key)).values()]
        removals = await self._removal_rows()
        return with_counts(
            [run for run in found if run_id is None or run.run_id == run_id],
            count_ids(row.get("run_id") for row in await self._rows()),
            count_ids(row.get("run_id") for row in removals),
            count_ids(undone_run(row["reason"], row["detail"]) for row in removals))

    async def run_heals(self, run_id: str) -> list[tuple[HealRecord, str | None]]:
        """Returns each heal row a run wrote, with the digest of the row it stored."""
        found = [(record_from_row(SimpleNamespace(**row)), row.get("event_digest"))
                 for row in await self._rows() if row.get("run_id") == run_id]
        found.sort(key=lambda pair: (pair[0].app_name, pair[0].user_id, pair[0].session_id,
                                     pair[0].synthetic_event_id))
        return found

    async def undone_heals(self, run_id: str) -> set[tuple[SessionKey, str]]:
        """Returns the heals of a run that undo runs took out: (session, synthetic event id)."""
        return {(SessionKey(row["app_name"], row["user_id"], row["session_id"]),
                 row["synthetic_event_id"])
                for row in await self._removal_rows()
                if undone_run(row["reason"], row["detail"]) == run_id}

    async def _history(self, wanted: Mapping[str, str], limit: int | None) -> list[HealRecord]:
        """The hash's heals with the ``wanted`` values, oldest first (see :meth:`history`)."""
        records = [record for record in (record_from_row(SimpleNamespace(**row))
                                         for row in await self._rows())
                   if all(getattr(record, name) == value for name, value in wanted.items())]
        records.sort(key=lambda r: (r.healed_at, r.app_name, r.user_id, r.session_id,
                                    r.synthetic_event_id))
        return records[:limit] if limit is not None else records
