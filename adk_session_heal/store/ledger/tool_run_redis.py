"""The tool-run ledger's Redis writer: one hash per session, beside ADK's Redis sessions.

For ADK's ``RedisSessionService`` the records live in Redis too, outside ADK's
key prefix (ADK's scans never read them): the hash
``adk_session_heal:tool_runs:{key prefix}{app}:{user}:{session id}`` holds one
field per function-call id, the record as JSON (the SQL table's columns). No
migration is needed. Every write also sets the hash's TTL
(``expire_seconds``, ADK's default session TTL of 7 days), so records of
sessions Redis has let go do not pile up.

``announce`` is ``HSETNX`` (an existing record is never overwritten);
``start``, ``renew`` and ``finish`` read the record and write it back in
WATCH/MULTI, retried if another writer touched the hash, so attempts count up
and an older attempt's heartbeat or end never overwrites a newer one. The
meaning of a record is :mod:`adk_session_heal.core.tool_runs`.

The heartbeat renews from a thread with its own event loop
(:mod:`adk_session_heal.runtime.tool_run_plugin`), over :meth:`RedisToolRunLedger.open_copy`:
a client with a connection pool of its own (an asyncio client's connections
belong to the loop that opened them), connecting as the original does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from ...core.session_key import SessionKey
from ...core.tool_runs import RunState, ToolRun, kept_result
from ...errors import LedgerError
from ..redis_clients import as_text as _text
from ..redis_clients import redis_errors as _redis_errors
from ..urls import REDIS_KEY_PREFIX, StoreUrl
from .ledger_base import RedisLedger

TOOL_RUNS_KEY_PREFIX = "adk_session_heal:tool_runs:"
"""A session's tool-run hash is this, ADK's key prefix, then ``app:user:session``."""

DEFAULT_EXPIRE_SECONDS = 7 * 24 * 3600
"""The hashes' TTL: ADK's default ``RedisSessionServiceConfig.ttl_seconds``."""

_MAX_ATTEMPTS = 50

_Change = Callable[[dict[str, Any] | None], dict[str, Any] | None]


def _record(run: ToolRun, **changes: Any) -> dict[str, Any]:
    return {"app_name": run.app_name, "user_id": run.user_id, "session_id": run.session_id,
            "call_id": run.call_id, "tool_name": run.tool_name,
            "invocation_id": run.invocation_id, "state": run.state.value, "host": run.host,
            "pid": run.pid, "attempt": run.attempt, "started_at": run.started_at,
            "lease_until": run.lease_until, "finished_at": None, "result": None,
            "result_truncated": False, **changes}


def _run(record: dict[str, Any]) -> ToolRun:
    result = record.get("result")
    return ToolRun(
        app_name=record["app_name"], user_id=record["user_id"],
        session_id=record["session_id"], call_id=record["call_id"],
        tool_name=record["tool_name"], invocation_id=record["invocation_id"],
        state=RunState(record["state"]), host=record["host"], pid=int(record["pid"]),
        attempt=int(record["attempt"]), started_at=float(record["started_at"]),
        lease_until=float(record["lease_until"]),
        finished_at=None if record.get("finished_at") is None else float(record["finished_at"]),
        result=kept_result(result),
        result_truncated=bool(record.get("result_truncated")),
    )


class RedisToolRunLedger(RedisLedger):
    """Writes and reads tool runs beside a ``RedisSessionService``'s sessions.

    Args:
        client: A ``redis.asyncio`` client.
        key_prefix: ADK's key prefix of the sessions.
        owns_client: Close the client on :meth:`close`.
        expire_seconds: The TTL set on a session's hash at each write.
    """

    def __init__(self, client: Any, *, key_prefix: str = REDIS_KEY_PREFIX,
                 owns_client: bool = False,
                 expire_seconds: int = DEFAULT_EXPIRE_SECONDS) -> None:
        super().__init__(client, key_prefix=key_prefix, owns_client=owns_client)
        self.expire_seconds = expire_seconds
        self._own_pool: Any = None

    @classmethod
    @asynccontextmanager
    async def reading(cls, url: StoreUrl | None) -> AsyncIterator[RedisToolRunLedger | None]:
        """A Redis store's tool-run hashes, beside its sessions; ``None`` without a URL."""
        if url is None:
            yield None
            return
        runs = cls.from_url(url)
        try:
            yield runs
        finally:
            await runs.close()

    def open_copy(self) -> RedisToolRunLedger:
        """Returns this ledger over a client of its own, for another thread's event loop.

        The client has a new connection pool of the same class with the same
        connection settings (host, credentials, TLS, timeouts, decoding).
        Nothing connects until the copy is used; :meth:`close` closes it.

        Raises:
            LedgerError: The client has no connection pool to copy (a cluster client).
        """
        pool = getattr(self._client, "connection_pool", None)
        if pool is None:
            raise LedgerError(f"cannot open a second {type(self._client).__name__} for tool "
                              "leases: only a redis.asyncio.Redis client is supported")
        fresh = type(pool)(connection_class=pool.connection_class,
                           max_connections=pool.max_connections, **pool.connection_kwargs)
        copy = RedisToolRunLedger(type(self._client)(connection_pool=fresh),
                                  key_prefix=self.key_prefix, owns_client=True,
                                  expire_seconds=self.expire_seconds)
        copy._own_pool = fresh
        return copy

    def hash_key(self, key: SessionKey) -> str:
        """The hash holding one session's tool runs."""
        return (f"{TOOL_RUNS_KEY_PREFIX}{self.key_prefix}"
                f"{key.app_name}:{key.user_id}:{key.session_id}")

    async def check(self) -> None:
        """Nothing to install: the hashes are created by the first write."""

    async def announce(self, runs: Sequence[ToolRun]) -> set[str]:
        """Records calls the runner is about to run, keeping any existing record.

        Returns:
            The call ids this call recorded (``HSETNX`` set them): an id
            already recorded is not one.
        """
        if not runs:
            return set()
        RedisError, _ = _redis_errors()
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                for run in runs:
                    hash_key = self.hash_key(SessionKey(run.app_name, run.user_id,
                                                        run.session_id))
                    pipe.hsetnx(hash_key, run.call_id, json.dumps(
                        _record(run, state=RunState.ANNOUNCED.value, attempt=0)))
                    pipe.expire(hash_key, self.expire_seconds)
                replies = await pipe.execute()
            return {run.call_id for run, written in zip(runs, replies[::2], strict=True)
                    if written}
        except RedisError as exc:
            raise LedgerError(f"cannot announce tool calls in Redis: {type(exc).__name__}") from exc

    async def _update(self, run: ToolRun, change: _Change, doing: str) -> dict[str, Any] | None:
        """Reads the call's record and writes ``change(record)`` back, atomically (WATCH)."""
        RedisError, WatchError = _redis_errors()
        hash_key = self.hash_key(SessionKey(run.app_name, run.user_id, run.session_id))
        try:
            for _ in range(_MAX_ATTEMPTS):
                async with self._client.pipeline(transaction=True) as pipe:
                    try:
                        await pipe.watch(hash_key)
                        raw = _text(await pipe.hget(hash_key, run.call_id))
                        new = change(json.loads(raw) if raw else None)
                        if new is None:
                            await pipe.unwatch()
                            return None
                        pipe.multi()
                        pipe.hset(hash_key, run.call_id, json.dumps(new))
                        pipe.expire(hash_key, self.expire_seconds)
                        await pipe.execute()
                        return new
                    except WatchError:
                        continue
        except RedisError as exc:
            raise LedgerError(f"cannot {doing} in Redis: {type(exc).__name__}") from exc
        raise LedgerError(f"cannot {doing} in Redis: the record kept changing")

    async def start(self, run: ToolRun) -> int:
        """Records that a tool is about to run; returns the attempt number recorded."""
        def started(current: dict[str, Any] | None) -> dict[str, Any]:
            attempt = int(current["attempt"]) + 1 if current else 1
            return _record(run, state=RunState.STARTED.value, attempt=attempt)

        record = await self._update(run, started, "record a tool start")
        assert record is not None
        return int(record["attempt"])

    async def renew(self, run: ToolRun, lease_until: float) -> bool:
        """Pushes a running attempt's lease to ``lease_until``; ``False`` if it is not running."""
        def renewed(current: dict[str, Any] | None) -> dict[str, Any] | None:
            if (not current or int(current["attempt"]) != run.attempt
                    or current["state"] != RunState.STARTED.value):
                return None
            return {**current, "lease_until": lease_until}

        return await self._update(run, renewed, "renew a tool lease") is not None

    async def finish(self, run: ToolRun, state: RunState, finished_at: float,
                     result: str | None, truncated: bool) -> bool:
        """Records how an attempt ended; ``False`` if a newer attempt replaced it."""
        def ended(current: dict[str, Any] | None) -> dict[str, Any] | None:
            if not current or int(current["attempt"]) != run.attempt:
                return None
            return {**current, "state": state.value, "finished_at": finished_at,
                    "lease_until": finished_at, "result": result,
                    "result_truncated": truncated}

        return await self._update(run, ended, "record a tool's end") is not None

    async def runs(self, key: SessionKey, call_ids: Iterable[str] | None = None
                   ) -> dict[str, ToolRun]:
        """Returns the session's tool runs by call id (only ``call_ids`` when given)."""
        RedisError, _ = _redis_errors()
        try:
            found = await self._client.hgetall(self.hash_key(key))
        except RedisError as exc:
            raise LedgerError(f"cannot read tool runs in Redis: {type(exc).__name__}") from exc
        wanted = None if call_ids is None else set(call_ids)
        runs: dict[str, ToolRun] = {}
        for field, value in found.items():
            call_id = _text(field) or ""
            if wanted is None or call_id in wanted:
                runs[call_id] = _run(json.loads(_text(value) or "{}"))
        return runs

    async def close(self) -> None:
        """Closes the client if this ledger opened it, and the pool of a copy."""
        await super().close()
        if self._own_pool is not None:  # a client given a pool leaves it open
            await self._own_pool.disconnect()
