"""A :class:`~adk_session_heal.store.base.SessionFilter` as SQL, per engine.

The filter itself is a plain value; this module turns it into the ``WHERE``
clause a SQL layout's reads bind (:func:`where_clause`) and into the ordered
read of ``events`` (:func:`events_in_order`, an :class:`EventsQuery`), with
what differs between SQLite, PostgreSQL and MySQL/MariaDB: a shard hashed
where that measured cheapest, ``since`` as a row-value ``IN`` over the
changed and unsettled sessions' keys, and MySQL/MariaDB's read along ADK's
newest-first index, shard by key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .incremental import UNSETTLED_TABLE_NAME, column_text, scope_id

if TYPE_CHECKING:
    from ..core.shards import Shard
    from .base import SessionFilter
    from .incremental import Since

KEYS_PER_READ = 100
"""Sessions per read when a MySQL/MariaDB shard reads its sessions by key
(:meth:`EventsQuery.page`): MariaDB turns an ``IN`` list of 1,000 values or
more (``in_predicate_conversion_threshold``; 334 keys of 3) into a join that
sorts every row, so a read names 100 keys (300 values)."""


class EventsQuery(NamedTuple):
    """A read of ``events`` (:func:`events_in_order`).

    Attributes:
        sql: The ``SELECT``, its parameters named ``:name``. With ``keys``,
            its ``{keys}`` is to be replaced by one page's keys (:meth:`page`).
        params: Its bound parameters (with ``keys``: the keys query's).
        newest_first: Each session's rows come newest first (reverse them).
        keys: ``None``, or (a MySQL/MariaDB shard) the ``SELECT`` of the
            sessions' keys to read, page by page (:meth:`page`).
    """

    sql: str
    params: dict[str, Any]
    newest_first: bool = False
    keys: str | None = None

    def keys_after(self, last: Sequence[Any] | None) -> tuple[str, dict[str, Any]]:
        """Returns the query of the next page of keys, after ``last`` (``None``: the first).

        Keyset paging along ``sessions``' primary key, so each page is a short
        range of that index (``(app_name, user_id, id)`` is unique under the
        columns' collation, so no key is skipped or read twice).
        """
        assert self.keys is not None
        if last is None:
            return self.keys.replace("{after}", ""), self.params
        params = {**self.params, "after_a": last[0], "after_u": last[1], "after_s": last[2]}
        return self.keys.replace("{after}", (
            "(app_name > :after_a OR (app_name = :after_a AND (user_id > :after_u OR "
            "(user_id = :after_u AND id > :after_s)))) AND ")), params

    def page(self, keys: Sequence[Sequence[Any]]) -> tuple[str, dict[str, Any]]:
        """Returns the read of these sessions' events (at most :data:`KEYS_PER_READ`)."""
        rows = []
        params: dict[str, Any] = {}
        for n, (app_name, user_id, session_id) in enumerate(keys):
            params[f"k_{n}_a"], params[f"k_{n}_u"], params[f"k_{n}_s"] = (
                app_name, user_id, session_id)
            rows.append(f"(:k_{n}_a, :k_{n}_u, :k_{n}_s)")
        return self.sql.replace("{keys}", ", ".join(rows)), params


def where_clause(
    where: SessionFilter, session_column: str, dialect: str | None = None, *,
    epoch_times: bool = False,
) -> tuple[str, dict[str, Any]]:
    """Returns a SQL ``WHERE`` clause (or ``""``) and its bound parameters.

    Args:
        where: The filter.
        session_column: The session id's column: ``"session_id"`` in
            ``events``, ``"id"`` in ``sessions``.
        dialect: The engine's SQLAlchemy dialect name (needed for a shard,
            see :meth:`~adk_session_heal.core.shards.Shard.sql`, and for ``since``).
        epoch_times: ``sessions.update_time`` holds POSIX seconds
            (``SqliteSessionService``), not a ``DATETIME``.

    Raises:
        ValueError: A shard is asked for without a dialect that can compute it.
    """
    clauses: list[str] = []
    params: dict[str, Any] = {}
    for column, name, value in (("app_name", "app_name", where.app_name),
                                ("user_id", "user_id", where.user_id),
                                (session_column, "session_id", where.session_id)):
        if value is not None:
            clauses.append(f"{column} = :{name}")
            params[name] = value
    if where.shard is not None:
        clauses.append(_in_shard(where.shard, session_column, dialect or ""))
    if where.since is not None:
        clauses.append(_changed(where.since, session_column, dialect or "", epoch_times,
                                params))
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def events_in_order(
    where: SessionFilter, select: Sequence[str], tie: str, dialect: str, *,
    epoch_times: bool = False, newest_first_index: str | None = None,
) -> EventsQuery:
    """Returns the ``SELECT`` of the matching ``events`` rows in ADK's read order.

    Session by session (app, user, session id), then by ``timestamp`` and
    ``tie``. On SQLite a shard (without ``since``) is read through
    ``sessions``: the shard function runs once per session instead of once
    per events row, and SQLite walks each session's events index instead of
    sorting (a ``--shard 1/2`` of 1M events read in 0.80 s instead of
    1.33 s; the whole file in 1.79-1.85 s; measured). Like PostgreSQL's
    shard clause (:func:`_in_shard`), a shard then reads only events whose
    session has its row in ``sessions``, as ADK does (its foreign key keeps
    them there).

    On SQLite, ``newest_first_index`` (ADK's index of that name, below)
    reads each session newest first too, whether the file has the index or
    not: SQLite walks it backwards within each session, and the ascending
    read sorted each session's rows in a temporary B-tree (100,000 events: 1.62
    -> 1.29 G instructions to fetch, callgrind).

    On MySQL/MariaDB, ``newest_first_index`` names an index on ``(app_name,
    user_id, session_id, timestamp DESC, tie DESC)`` (ADK's): without
    ``since``, the rows are read along it, **each session's newest first**
    (:attr:`EventsQuery.newest_first`), and the caller reverses each
    session. That is the same order exactly
    (``timestamp`` and ``tie`` are unique within a session) without the
    sort MariaDB otherwise runs over every row: 1M events took 22.8 s to
    read sorted and 6.9 s along the index (the ``mysql`` client, measured).
    A shard there reads by key (:attr:`EventsQuery.keys`): pages of its
    sessions' keys from ``sessions``, then each page's events, so the
    server reads only the shard's rows instead of walking the whole index
    for each shard (server CPU for one of 2 shards of 1M events: 2.7 s
    hashing each row, 1.75 s by key; the whole read 2.5 s; measured) and,
    as on SQLite and PostgreSQL, only sessions that have their row.

    Args:
        where: The filter.
        select: The column names to read (an expression only of ``events``'
            columns other than the key columns, unqualified).
        tie: The column ordering events of equal ``timestamp``.
        dialect: The engine's SQLAlchemy dialect name.
        epoch_times: As in :func:`where_clause`.
        newest_first_index: SQLite (read newest first) and MySQL/MariaDB: the
            index to read each session newest first along (see above).
    """
    newest = " DESC" if dialect == "sqlite" and newest_first_index is not None else ""
    if dialect == "sqlite" and where.shard is not None and where.since is None:
        clause, params = where_clause(where, "id", dialect, epoch_times=epoch_times)
        return EventsQuery(
            f"SELECT {', '.join(f'heal_e.{c}' if c.isidentifier() else c for c in select)} FROM "
            f"(SELECT app_name AS heal_a, user_id AS heal_u, id AS heal_s "
            f"FROM sessions{clause}) heal_k CROSS JOIN events heal_e "
            f"ON heal_e.app_name = heal_k.heal_a AND heal_e.user_id = heal_k.heal_u "
            f"AND heal_e.session_id = heal_k.heal_s ORDER BY heal_k.heal_a, "
            f"heal_k.heal_u, heal_k.heal_s, heal_e.timestamp{newest}, heal_e.{tie}{newest}",
            params, newest_first=bool(newest))
    if newest_first_index is not None and dialect in ("mysql", "mariadb") and (
            where.since is None):
        head = f"SELECT {', '.join(select)} FROM events FORCE INDEX ({newest_first_index})"
        order = f" ORDER BY app_name, user_id, session_id, timestamp DESC, {tie} DESC"
        if where.shard is not None:
            clause, params = where_clause(where, "id", dialect)
            return EventsQuery(
                f"{head} WHERE (app_name, user_id, session_id) IN ({{keys}}){order}", params,
                newest_first=True,
                keys=(f"SELECT app_name, user_id, id FROM sessions WHERE {{after}}"
                      f"{clause.removeprefix(' WHERE ')} ORDER BY app_name, user_id, id "
                      f"LIMIT {KEYS_PER_READ}"))
        clause, params = where_clause(where, "session_id", dialect)
        return EventsQuery(f"{head}{clause}{order}", params, newest_first=True)
    clause, params = where_clause(where, "session_id", dialect, epoch_times=epoch_times)
    return EventsQuery(f"SELECT {', '.join(select)} FROM events{clause} "
                       f"ORDER BY app_name, user_id, session_id, timestamp{newest}, {tie}{newest}",
                       params, newest_first=bool(newest))


def _in_shard(shard: Shard, session_column: str, dialect: str) -> str:
    """The clause keeping one shard's sessions, hashed where that measured cheapest.

    On PostgreSQL the ``events`` rows are kept through a row-value ``IN`` over
    the shard's keys in ``sessions`` (as a scan counts sessions): one hash per
    session instead of one per event. Two shards side by side of 300k events
    took 1.41x one whole scan hashing each row, 0.69x this way (measured). On
    MariaDB this ``IN`` measured slower than hashing each row. SQLite's ordered
    reads join ``sessions`` instead, and MySQL/MariaDB's read by key along
    ADK's index (:func:`events_in_order`); their other reads
    (the prefilter, ``since``, MariaDB without that index) hash each row here.
    """
    if dialect != "postgresql" or session_column == "id":
        return shard.sql(dialect, session_column)
    return (f"(app_name, user_id, {session_column}) IN (SELECT heal_s.a, heal_s.u, heal_s.s FROM "
            f"(SELECT app_name AS a, user_id AS u, id AS s FROM sessions "
            f"WHERE {shard.sql(dialect, 'id')}) heal_s)")


def _changed(since: Since, session_column: str, dialect: str, epoch_times: bool,
             params: dict[str, Any]) -> str:
    """The clause keeping sessions updated from ``since.after`` on, or left unsettled.

    A row-value ``IN`` over the sessions' keys, so the database reads the few
    sessions' rows through its index on ``events`` instead of testing every row.
    """
    if epoch_times:
        params["since_after"] = since.after
        bound = ":since_after"
    else:
        params["since_after"] = column_text(since.after)
        bound = ("CAST(CAST(:since_after AS TEXT) AS TIMESTAMP)" if dialect == "postgresql"
                 else ":since_after")
    changed = f"update_time >= {bound}"
    if dialect == "sqlite" and not epoch_times:  # a number sorts before any text in SQLite
        changed = f"(typeof(update_time) <> 'text' OR {changed})"
    keys = f"SELECT app_name AS a, user_id AS u, id AS s FROM sessions WHERE {changed}"
    if since.recheck is not None:
        params["since_scope"] = scope_id(since.recheck)
        keys += (f" UNION SELECT app_name, user_id, session_id FROM {UNSETTLED_TABLE_NAME} "
                 "WHERE scope_id = :since_scope")
    # The UNION sits in a derived table: MariaDB runs an IN over a bare UNION once per
    # events row (0.43 s on 100k events) and this one once (0.01 s).
    return (f"(app_name, user_id, {session_column}) IN "
            f"(SELECT heal_k.a, heal_k.u, heal_k.s FROM ({keys}) heal_k)")
