"""ADK's ``RedisSessionService`` layout: one JSON string per session, healed in WATCH/MULTI.

The layout (google-adk 2.7 and later, ``google.adk.integrations.redis``; the
``redis`` package comes with ``google-adk[redis]`` or ``adk-session-heal[redis]``):

* ``{key_prefix}{app}:{user}:{session id}`` is a STRING holding the whole
  session, ``Session.model_dump_json()``: session-scoped state, every event
  (null fields included), ``last_update_time``. ADK reads the events in the
  order the list holds them. Each ADK write sets the key's TTL to
  ``ttl_seconds`` (7 days by default; ``0``: none).
* ``{key_prefix}app_state:{app}`` and ``{key_prefix}user_state:{app}:{user}``
  hold app and user state. They match the session key pattern too, so, as in
  ADK's ``list_sessions``, a key counts as a session only when its value is one
  whose app, user and id name that very key.

A write, per session: WATCH the key, GET it, re-count its events (less the
planned heals already there) and skip the session if it moved, then insert
each missing heal's JSON right after its anchor event's and SET the value back
with ``KEEPTTL`` in MULTI/EXEC, the heals' ledger records (``HSETNX``) in the
same EXEC. Every other byte of the value is kept, ``last_update_time``
included. If anyone wrote the key in between, EXEC fails (``WatchError``) and
the session is read and decided again, so concurrent healers store one heal.

ADK's own ``append_event`` checks no revision on Redis. From 2.12 it reloads
the stored session inside its own WATCH transaction and appends to what it
finds, so a heal stays whoever holds the session. ADK 2.7 to 2.11 SET the
caller's own event list instead: a process that loaded the session before a
heal overwrites the heal (and any other write made since) with its next
append; the next read plans the same heal id again.

The heal ledger's keys sit beside ADK's (see
:mod:`~adk_session_heal.store.ledger.heal_redis`). A heal taken back out (a
late result superseded it) is cut from the value the same way, in the same
kind of transaction, only if the one rule lets it go
(:func:`~adk_session_heal.store.base.decide_removal`), its record pushed on
the removals list in the same EXEC. An operator's resolution is spliced in
and the answer it supersedes cut out in one EXEC too, with its heal record,
that removal's record and its own record.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core.event_access import STORED_JSON
from ...core.healing import Heal, SessionHeals
from ...core.session_key import SessionKey
from ...errors import StoreError, UnsupportedStoreError
from ..base import (
    DamagedRow,
    Layout,
    RemoveOutcome,
    ResolveOutcome,
    ResolveResult,
    SessionStore,
    StoredSession,
    WriteOutcome,
    WriteResult,
    decide_removal,
    decide_resolution,
    stores_as_adk_does,
)
from ..batch_outcomes import checked, discount_planned
from ..driver_errors import translate_error
from ..engines import Timeouts
from ..json_decode import loads as json_loads
from ..ledger.heal_redis import (
    LEDGER_KEY_PREFIX,
    REMOVALS_KEY_PREFIX,
    RESOLUTIONS_KEY_PREFIX,
    RedisHealLedger,
    ledger_field,
)
from ..ledger.heal_table import heal_ledger_row, removal_row, resolution_row
from ..ledger.revisions import LEDGER_HEAD_REVISION
from ..redis_clients import as_text, close_client, import_redis_asyncio, redis_errors
from ..urls import REDIS_KEY_PREFIX, StoreUrl
from .redis_values import ParsedSession, parse_session_value, with_heals, without_events

if TYPE_CHECKING:  # a stored event is read back as an Event only after a lost write race
    from contextlib import AbstractAsyncContextManager

    from google.adk.events.event import Event

    from ...core.tool_runs import ToolRunReader
    from ..base import Removal, SessionFilter
    from ..engines import TimeoutArg

ADK_REDIS_MODULE = "google.adk.integrations.redis"
"""Where ADK (2.7+) keeps ``RedisSessionService``."""

_CHUNK = 100
_MAX_ATTEMPTS = 50
_MIN_SERVER = (6, 0)  # SET ... KEEPTTL


def stores_like_adk_redis(service: object) -> bool:
    """Whether ``service`` is ADK's ``RedisSessionService``, storing sessions as ADK does.

    The same rule as every other layout's (:func:`~adk_session_heal.store.base.stores_as_adk_does`):
    a subclass qualifies only if it overrides nothing but ``__init__``. Nothing
    is imported: a service of that class can only exist once ADK's module is
    loaded.
    """
    module = sys.modules.get(ADK_REDIS_MODULE)
    adk_class = getattr(module, "RedisSessionService", None)
    return isinstance(adk_class, type) and stores_as_adk_does(service, adk_class)


def _session_key(prefix: str, key: SessionKey) -> str:
    """ADK's ``RedisSessionService._session_key``."""
    return f"{prefix}{key.app_name}:{key.user_id}:{key.session_id}"


def _escape_glob(value: str) -> str:
    """Escapes Redis glob characters so that ``value`` matches only itself (as ADK does)."""
    return "".join("\\" + c if c in "\\*?[]" else c for c in value)


def _named(prefix: str, key: str, doc: dict[str, Any]) -> SessionKey | None:
    """The session an object names, if its app, user and id name ``key``."""
    app, user, session_id = doc.get("app_name"), doc.get("user_id"), doc.get("id")
    if not (isinstance(app, str) and isinstance(user, str) and isinstance(session_id, str)):
        return None
    found = SessionKey(app, user, session_id)
    return found if _session_key(prefix, found) == key else None


def _read_value(
    prefix: str, key: str, value: str | bytes
) -> tuple[SessionKey | None, Any, str | None]:
    """Decodes one value under a session key: ``(session, doc, problem)``.

    ``session`` is ``None`` for a JSON object that is no session of ``key``
    (app or user state); a damaged value gets the session its key names.
    """
    guessed = SessionKey(*(key[len(prefix):].split(":", 2) + ["", ""])[:3])
    try:
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        doc = json_loads(raw.decode())
    except UnicodeDecodeError:
        return guessed, None, f"the value is binary ({len(raw):,} bytes, not UTF-8 text)"
    except ValueError as exc:
        return guessed, None, f"the value is not JSON ({str(exc).splitlines()[0][:80]})"
    if not isinstance(doc, dict):
        return guessed, None, "the value is not a JSON object"
    found = _named(prefix, key, doc)
    if found is not None and not isinstance(doc.get("events"), list):
        return found, None, "the value's events is not a list"
    return found, doc, None


@dataclass(frozen=True, slots=True)
class _Decision:
    """What to do with one session as read: the results, and the value to write."""

    results: list[WriteResult]
    value: str | None = None
    inserted: tuple[Heal, ...] = ()


def _decide(planned: SessionHeals, key: str, raw: str | None, read_back: bool) -> _Decision:
    """Decides one session's heals from its stored value (pure)."""
    if raw is None:
        return _Decision([WriteResult(heal, WriteOutcome.GONE) for heal in planned.heals])
    try:
        parsed = parse_session_value(raw)
    except ValueError as exc:
        raise StoreError(f"Redis key {key!r} does not hold an ADK session ({exc})") from exc
    ids = [event.get("id") if isinstance(event, dict) else None for event in parsed.events]
    k = planned.key
    counts = {k: len(ids)} if ids else {}
    planned_ids = {heal.event_id for heal in planned.heals}
    present = [(k.app_name, k.user_id, k.session_id, i) for i in ids if i in planned_ids]
    live, skipped = checked([planned], discount_planned([planned], counts, present))
    if not live:
        return _Decision(skipped)
    results: list[WriteResult] = []
    inserted: list[Heal] = []
    for heal in planned.heals:
        if heal.event_id in ids:
            stored = (_event(parsed.events[ids.index(heal.event_id)]) if read_back else None)
            results.append(WriteResult(heal, WriteOutcome.PRESENT, stored))
        else:
            results.append(WriteResult(heal, WriteOutcome.WRITTEN))
            inserted.append(heal)
    if not inserted:
        return _Decision(results)
    return _Decision(results, with_heals(raw, parsed, inserted), tuple(inserted))


def _parsed(key: str, raw: str) -> ParsedSession:
    """Parses a session value, or raises the one-line error of a value that is no session."""
    try:
        return parse_session_value(raw)
    except ValueError as exc:
        raise StoreError(f"Redis key {key!r} does not hold an ADK session ({exc})") from exc


def _all_objects(events: Sequence[Any]) -> bool:
    """Whether every stored event is a JSON object (else the session cannot be judged)."""
    return all(isinstance(event, dict) for event in events)


def _stored_json(heal: Heal) -> dict[str, Any] | None:
    """What :func:`~.redis_values.with_heals` stores for a run's heal (``None``: not digested)."""
    return json.loads(heal.event.model_dump_json()) if heal.record.run_id is not None else None


class RedisStore(SessionStore):
    """ADK's ``RedisSessionService`` layout (see the module docstring).

    Args:
        client: Returns the ``redis.asyncio`` client (a service's own, or one
            opened from a URL).
        key_prefix: ADK's ``RedisSessionServiceConfig.key_prefix``.
        url: The URL it was opened from; ``None`` over a service.
        owns_client: Close the client on :meth:`close`.
    """

    layout = Layout.REDIS

    def __init__(
        self,
        client: Callable[[], Any],
        key_prefix: str = REDIS_KEY_PREFIX,
        url: StoreUrl | None = None,
        *,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self.key_prefix = key_prefix
        self.url = url
        self._owns_client = owns_client

    @classmethod
    def from_service(cls, service: Any) -> RedisStore:
        """Writes through a ``RedisSessionService``'s own client and key prefix."""
        return cls(service._get_redis, service.config.key_prefix)

    def __str__(self) -> str:
        """Returns the redacted URL."""
        return str(self.url) if self.url is not None else "the Redis session store"

    @property
    def ledger_key(self) -> str:
        """The heal ledger's hash for this key prefix."""
        return LEDGER_KEY_PREFIX + self.key_prefix

    def _error(self, exc: Exception, doing: str) -> Exception:
        return translate_error(exc, self.url, doing) if self.url is not None else exc

    async def _keys(self, where: SessionFilter) -> list[str]:
        """Returns the candidate session keys of a filter, sorted (each once)."""
        if None not in (where.app_name, where.user_id, where.session_id):
            key = SessionKey(where.app_name or "", where.user_id or "", where.session_id or "")
            return [_session_key(self.key_prefix, key)]
        parts = (where.app_name, where.user_id, where.session_id)
        pattern = self.key_prefix + ":".join(
            "*" if part is None else _escape_glob(part) for part in parts)
        found: set[str] = set()
        async for key in self._client().scan_iter(match=pattern, count=1000):
            found.add(as_text(key) or "")
        return sorted(found)

    async def _sessions(
        self, where: SessionFilter
    ) -> AsyncIterator[tuple[SessionKey, Any, str | None]]:
        """Yields each matching session's key, decoded value and problem, in key order.

        A value that is not JSON, or not an object, or a session of this key
        whose ``events`` is not a list, is damaged: it comes with its problem
        (and the session key its Redis key names). Other JSON objects (app and
        user state) are not sessions and are passed over, as ADK does.
        """
        RedisError, _ = redis_errors()
        try:
            keys = await self._keys(where)
            for first in range(0, len(keys), _CHUNK):
                chunk = keys[first:first + _CHUNK]
                values = await self._client().mget(chunk)
                for key, value in zip(chunk, values, strict=True):
                    if value is None:
                        continue
                    found, doc, problem = _read_value(self.key_prefix, key, value)
                    if found is not None and where.holds(found):
                        yield found, doc, problem
        except (RedisError, OSError) as exc:
            raise self._error(exc, "read") from exc

    async def count_sessions(self, where: SessionFilter) -> int:
        """Returns how many sessions match (each key's value is read and checked)."""
        return sum([1 async for _ in self._sessions(where)])

    async def stream_sessions(self, where: SessionFilter, *, pass_clean: bool = False,
                              ) -> AsyncGenerator[StoredSession, None]:
        """Yields every matching session that has events, its events in stored order.

        Events that are not JSON objects are the session's damaged rows; so is
        a whole value that cannot be read (its event id unknown). Every
        session is decoded whole (``pass_clean`` is not used here).
        """
        del pass_clean
        async for key, doc, problem in self._sessions(where):
            if problem is not None:
                yield StoredSession(key, [], (DamagedRow(None, problem),))
                continue
            events = doc["events"]
            if all(type(event) is dict for event in events):
                if events:
                    yield StoredSession(key, events)
                continue
            damaged = tuple(
                DamagedRow(None, f"events[{index}] is not a JSON object")
                for index, event in enumerate(events) if type(event) is not dict)
            yield StoredSession(key, [e for e in events if type(e) is dict], damaged)

    def heal_ledger(self, timeout: TimeoutArg = None) -> RedisHealLedger:
        """Opens the hashes beside these sessions that keep the heal ledger."""
        return RedisHealLedger.from_url(self._opened_url())

    def tool_runs(
        self, timeout: TimeoutArg = None
    ) -> AbstractAsyncContextManager[ToolRunReader | None]:
        """The tool-run hashes beside these sessions (see the base class)."""
        from ..ledger.tool_run_redis import RedisToolRunLedger

        return RedisToolRunLedger.reading(self.url)

    async def ledger_revision(self) -> str | None:
        """The ledger is a hash created on first write: always current, never migrated."""
        return LEDGER_HEAD_REVISION

    async def write(
        self, batch: Sequence[SessionHeals], *, ledger: bool, read_back: bool = False
    ) -> list[WriteResult]:
        """Applies the heals, one optimistic transaction per session (see the module)."""
        RedisError, _ = redis_errors()
        results: list[WriteResult] = []
        try:
            for planned in batch:
                results.extend(await self._write_session(planned, ledger, read_back))
        except (RedisError, OSError) as exc:
            raise self._error(exc, "write to") from exc
        return results

    async def _write_session(
        self, planned: SessionHeals, ledger: bool, read_back: bool
    ) -> list[WriteResult]:
        _, WatchError = redis_errors()
        key = _session_key(self.key_prefix, planned.key)
        for _ in range(_MAX_ATTEMPTS):
            async with self._client().pipeline(transaction=True) as pipe:
                await pipe.watch(key)
                decision = _decide(planned, key, as_text(await pipe.get(key)), read_back)
                if decision.value is None:
                    return decision.results
                pipe.multi()
                pipe.set(key, decision.value, keepttl=True)
                if ledger:
                    for heal in decision.inserted:
                        pipe.hsetnx(self.ledger_key, ledger_field(heal.record),
                                    json.dumps(heal_ledger_row(heal, _stored_json(heal))))
                try:
                    await pipe.execute()
                except WatchError:
                    continue
                return decision.results
        # Written by someone else on every attempt: it kept changing.
        return [WriteResult(heal, WriteOutcome.CHANGED) for heal in planned.heals]

    async def remove(self, batch: Sequence[Removal], *, ledger: bool) -> list[RemoveOutcome]:
        """Cuts heals of ours out of their sessions, one optimistic transaction per removal."""
        RedisError, _ = redis_errors()
        try:
            return [await self._remove_one(removal, ledger) for removal in batch]
        except (RedisError, OSError) as exc:
            raise self._error(exc, "write to") from exc

    async def _remove_one(self, removal: Removal, ledger: bool) -> RemoveOutcome:
        _, WatchError = redis_errors()
        key = _session_key(self.key_prefix, removal.key)
        for _ in range(_MAX_ATTEMPTS):
            async with self._client().pipeline(transaction=True) as pipe:
                await pipe.watch(key)
                raw = as_text(await pipe.get(key))
                if raw is None:
                    return RemoveOutcome.ABSENT
                parsed = _parsed(key, raw)
                if not _all_objects(parsed.events):
                    return RemoveOutcome.KEPT
                decision = decide_removal(parsed.events, removal, access=STORED_JSON,
                                          stored=dict)
                if decision.outcome is not RemoveOutcome.REMOVED or decision.position is None:
                    return decision.outcome
                pipe.multi()
                pipe.set(key, without_events(raw, parsed, {decision.position}), keepttl=True)
                if ledger:
                    pipe.rpush(REMOVALS_KEY_PREFIX + self.key_prefix,
                               json.dumps(removal_row(removal)))
                try:
                    await pipe.execute()
                except WatchError:
                    continue
                return RemoveOutcome.REMOVED
        # Written by someone else on every attempt: kept this time, the next read tries again.
        return RemoveOutcome.KEPT

    async def resolve(
        self, resolution: Heal, removal: Removal, *, ledger: bool
    ) -> ResolveResult:
        """Splices a resolution in and cuts what it supersedes out, in one EXEC."""
        RedisError, WatchError = redis_errors()
        key = _session_key(self.key_prefix, removal.key)
        try:
            for _ in range(_MAX_ATTEMPTS):
                async with self._client().pipeline(transaction=True) as pipe:
                    await pipe.watch(key)
                    raw = as_text(await pipe.get(key))
                    if raw is None:
                        return ResolveResult(ResolveOutcome.GONE)
                    parsed = _parsed(key, raw)
                    if not _all_objects(parsed.events):
                        return ResolveResult(ResolveOutcome.KEPT, "the session holds an event "
                                             "that is not a JSON object")
                    dumped = json.loads(resolution.event.model_dump_json())
                    decision = decide_resolution(parsed.events, dumped, removal,
                                                 access=STORED_JSON, stored=dict)
                    if decision.result.outcome not in (ResolveOutcome.WRITTEN,
                                                       ResolveOutcome.PRESENT):
                        return decision.result
                    value = with_heals(raw, parsed, [resolution]) if decision.insert else raw
                    placed = parse_session_value(value)
                    gone = {i for i, e in enumerate(placed.events)
                            if e.get("id") == removal.event_id}
                    pipe.multi()
                    pipe.set(key, without_events(value, placed, gone), keepttl=True)
                    if ledger:
                        if decision.insert:
                            pipe.hsetnx(self.ledger_key, ledger_field(resolution.record),
                                        json.dumps(heal_ledger_row(resolution,
                                                                   _stored_json(resolution))))
                        pipe.rpush(REMOVALS_KEY_PREFIX + self.key_prefix,
                                   json.dumps(removal_row(removal)))
                        pipe.rpush(RESOLUTIONS_KEY_PREFIX + self.key_prefix,
                                   json.dumps(resolution_row(resolution, removal)))
                    try:
                        await pipe.execute()
                    except WatchError:
                        continue
                    return decision.result
        except (RedisError, OSError) as exc:
            raise self._error(exc, "write to") from exc
        raise StoreError(f"Redis key {key!r} kept changing while resolving: run it again")

    async def close(self) -> None:
        """Closes the client if this store opened it."""
        if self._owns_client:
            await close_client(self._client())


def _bad_option(url: StoreUrl, exc: Exception) -> UnsupportedStoreError:
    return UnsupportedStoreError(
        f"cannot use {url}: {url.scrub(str(exc))} (check the URL's options: redis-py's "
        "connection options, and key_prefix)"
    )


def _event(data: Any) -> Event:
    """Returns a stored event read back as an ``Event`` (ADK imported only then)."""
    from google.adk.events.event import Event

    return Event.model_validate(data)


async def open_redis_store(
    url: StoreUrl, *, writable: bool, timeouts: Timeouts | None = None
) -> RedisStore:
    """Connects to the Redis server a URL names.

    Args:
        url: A ``redis://`` or ``rediss://`` URL.
        writable: Check that the server can heal (Redis 6.0+).
        timeouts: How long to wait to connect and for each command.

    Raises:
        UnsupportedStoreError: redis-py is missing, the URL's options are not
            ones it takes, or (``writable``) the server is older than 6.0.
        StoreError: The server could not be reached.
    """
    redis_asyncio = import_redis_asyncio(url)
    RedisError, _ = redis_errors()
    try:
        waits = timeouts or Timeouts()
        # surrogateescape: a binary value reads as text that is reported damaged, not a crash.
        client = redis_asyncio.from_url(
            url.redis_url(), decode_responses=True, encoding_errors="surrogateescape",
            socket_connect_timeout=waits.connect, socket_timeout=waits.statement)
    except (ValueError, TypeError) as exc:
        raise _bad_option(url, exc) from exc
    try:
        await client.ping()
        if writable:
            version = str((await client.info("server")).get("redis_version", "0"))
            numbers = tuple(int(n) for n in version.split(".")[:2] if n.isdigit())
            if numbers < _MIN_SERVER:
                raise UnsupportedStoreError(
                    f"{url} runs Redis {version}: healing keeps each session's TTL with "
                    "SET ... KEEPTTL, which needs Redis 6.0 or later"
                )
    except (RedisError, OSError) as exc:
        await close_client(client)
        raise translate_error(exc, url, "connect to") from exc
    except (ValueError, TypeError) as exc:  # an option redis-py's connection refuses
        await close_client(client)
        raise _bad_option(url, exc) from exc
    except BaseException:
        await close_client(client)
        raise
    return RedisStore(lambda: client, url.redis_key_prefix, url, owns_client=True)
