"""The SQL-side prefilter: the database picks the sessions that can hold a finding.

A scan reads every event of every session, but in a healthy store almost every
session is *provably clean*: each of its calls is answered exactly once, later
in the read order, and nothing in it is of a shape the classifier would report
or refuse. :func:`candidates_query` asks the database (PostgreSQL,
MySQL/MariaDB or SQLite, each through its own JSON functions) for the rows of
every session that is **not** provably clean, in the order ADK reads them;
Python classifies only those. A session is a candidate when any of these holds:

* a row is not a readable JSON object, a key column the reader needs is NULL,
  or its ``content``, ``parts``, ``actions``, ``custom_metadata`` or ``timestamp``
  is of the wrong JSON type;
* a row is a streaming partial, names long-running tools, asks for a tool
  confirmation or a credential (a call it answers is pending), or rewinds;
* a row uses camelCase function keys, or (text-stored engines) holds the text
  ``"function`` more often than its parts hold function keys (a duplicate key,
  a nested copy: whatever JSON functions and Python's decoder might read
  differently), or escaped printable ASCII (``\\u0063ontent`` is ``content`` to
  Python, not to every engine's path lookup; ``json.dumps`` never writes it);
* a part is not an object, holds both a call and a response, or its call or
  response has no non-empty string id or a name that is not a string;
* an id is not called exactly once and answered exactly once, the answer
  sorting strictly after the call (ADK's attribution rule then pairs them and
  nothing is dead, pending, orphaned or duplicated).

That last check is the SQL form of
:func:`~adk_session_heal.core.pairing.answered_once`, made stricter (answers in a
later row, not just a later step); it only decides which sessions Python reads:
every finding still comes from :func:`~adk_session_heal.core.findings.classify` and
:func:`~adk_session_heal.core.pairing.pair`, the one pairing.

Anything the checks cannot read makes the session a candidate: the prefilter
may send a clean session to Python, never keep a finding from it. Ids are
compared byte for byte, as Python compares them. The differential tests
(``tests/store/test_prefilter.py``) compare prefiltered scans with full scans on
every engine over ugly stores.

Cost, measured (BENCHMARKS.md): the checks read each row's JSON three or four
times where a row is healthy, cheapest test first; rare keys are read only in
rows whose text names them. PostgreSQL reads ``jsonb`` in place (containment
and key tests, no copies of large responses) and computes the candidates'
keys in a query of their own, which may use parallel workers (a cursor never
does). SQLite's and MariaDB's JSON functions parse the text at every call, so
there the prefilter is slower than decoding each row once in Python and
classifying everything, and is off unless asked for (:data:`PREFILTER_PAYS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .json_sql import JsonbSql, JsonSql, sql_true

PREFILTER_DIALECTS = frozenset({"postgresql", "mysql", "mariadb", "sqlite"})
"""SQLAlchemy dialect names the prefilter has a query for."""

PREFILTER_PAYS = frozenset({"postgresql"})
"""Where the prefilter is used by default. SQLite 3.40 and MariaDB 10.11 ran it
slower than the full scan: their JSON functions parse the text at every call,
which costs more than decoding it once in Python (BENCHMARKS.md)."""


@dataclass(frozen=True, slots=True)
class Columns:
    """How a layout's ``events`` table is read.

    Attributes:
        select: The columns the stream selects (``event_data`` last).
        tie: The column ordering events of equal ``timestamp`` (``id``, or
            ``rowid`` for ADK's own SQLite file).
        key_columns: The reader takes ``invocation_id`` and ``timestamp`` from
            columns (a NULL one is a damaged row).
    """

    select: tuple[str, ...]
    tie: str
    key_columns: bool


def candidates_query(dialect: str, columns: Columns, where: str, *, keys_only: bool = False) -> str:
    """Returns the SQL streaming every row of every candidate session, in ADK's read order.

    Args:
        dialect: SQLAlchemy's dialect name (one of :data:`PREFILTER_DIALECTS`).
        columns: How the layout's ``events`` table is read.
        where: The session filter's ``WHERE`` clause over ``events`` (or ``""``).
        keys_only: Return only the candidates' keys ``(a, u, s)``, in order
            (PostgreSQL runs that part alone, so it may use parallel workers,
            which a cursor never does; see :func:`keyed_events_query`).

    Raises:
        ValueError: No query for ``dialect``.
    """
    if dialect not in PREFILTER_DIALECTS:
        raise ValueError(f"no prefilter for {dialect}")
    j: JsonSql = JsonbSql(dialect) if dialect == "postgresql" else JsonSql(dialect)
    d = "event_data"
    nulls = " OR invocation_id IS NULL OR timestamp IS NULL" if columns.key_columns else ""
    parts_type = j.parts_array(d)
    content_wrong = sql_true(f"NOT {j.type_is(d, ('content',), 'object', 'null')}")
    parts_wrong = sql_true(f"NOT {j.type_is(d, ('content', 'parts'), 'array', 'null')}")
    # One condition per WHEN, cheapest and commonest first: a row stops at the first
    # that holds, and a healthy row pays for two or three JSON reads.
    bad = [
        f"NOT {j.readable(d)}{nulls}",
        j.not_object(d),
        f"NOT {sql_true(parts_type)} AND ({content_wrong} OR {parts_wrong})",
        j.actions_wrong(d),
        j.awaiting(d),
        # Classification reads every call's time, even in a clean session: a time it
        # cannot read as a number is damage (and a number in a string is read).
        sql_true(f"NOT {j.type_is(d, ('timestamp',), 'number', 'null')}"),
        *j.foreign_escapes(d),
    ]
    rare = {  # keys ADK seldom writes: read only in rows whose text names them
        "partial": sql_true(f"NOT ({j.type_is(d, ('partial',), 'null')} "
                       f"OR {j.is_false(d, ('partial',))})"),
        "long_running": sql_true(
            f"NOT {j.type_is(d, ('long_running_tool_ids',), 'array', 'null')} OR "
            f"(CASE WHEN {j.type_is(d, ('long_running_tool_ids',), 'array')} "
            f"THEN {j.length(d, ('long_running_tool_ids',))} > 0 END)"),
        "longRunning": sql_true(j.present(d, ("longRunningToolIds",))),
        # Read for the heal marker in every response (an object, or damage).
        "custom_metadata": sql_true(f"NOT {j.type_is(d, ('custom_metadata',), 'object', 'null')}"),
        "customMetadata": sql_true(f"NOT {j.type_is(d, ('customMetadata',), 'object', 'null')}"),
        "ewind": sql_true(f"{j.present(d, ('actions', 'rewind_before_invocation_id'))} "
                     f"OR {j.present(d, ('actions', 'rewindBeforeInvocationId'))}"),
    }
    checks = " OR ".join(j.when_named(d, word, check) for word, check in rare.items())
    bad.append(f"{j.any_found(d, tuple(rare))} AND ({checks})" if j.text_stored else checks)
    rows = (f"SELECT app_name AS a, user_id AS u, session_id AS s, timestamp AS ts, "
            f"{columns.tie} AS t, CASE "
            + " ".join(f"WHEN {condition} THEN 1" for condition in bad)
            + f" ELSE 0 END AS bad{j.mention_count(d)} FROM events{where}")
    readable = j.readable(d)
    empty = _empty_parts(dialect)
    guard = readable if j.text_stored else parts_type  # jsonb_array_elements raises on a non-array
    source, value, vtype = j.elements(f"(CASE WHEN {guard} THEN {d} ELSE {empty} END)", "e")
    # The parts that can matter: not objects, or objects whose text names a function.
    # Their value is read out once here (SQLite serialises a json_each value at every use).
    elements = (
        f"SELECT events.app_name AS a, events.user_id AS u, events.session_id AS s, "
        f"events.timestamp AS ts, events.{columns.tie} AS t, {vtype} AS vt, {value} AS v "
        f"FROM events{j.lateral} {source} "
        f"WHERE {'(' + where[len(' WHERE '):] + ') AND ' if where else ''}"
        f"NOT ({j.element_type_is(vtype, 'object')} AND {j.plain_part(value)})"
    )
    v = "v"
    obj = j.element_type_is("vt", "object")
    if j.text_stored:
        call_here = j.has_value(v, "function_call")
        response_here = j.has_value(v, "function_response")
        call_id = j.exact(j.text(v, ("function_call", "id")))
        response_id = j.exact(j.text(v, ("function_response", "id")))
        call_ok = _well_formed(j, v, "function_call")
        response_ok = _well_formed(j, v, "function_response")
        source_parts = "elements"
    else:
        # PostgreSQL: each part's call and response are read out once, as columns of
        # jsonb_to_record (a JSON null is SQL NULL there, as has_value wants), so the
        # aggregates below compare columns instead of reading the part again at every
        # reference (the planner repeats an inlined expression at each use).
        call, response = "f.function_call", "f.function_response"
        call_here, response_here = f"{call} IS NOT NULL", f"{response} IS NOT NULL"
        call_id, response_id = j.text(call, ("id",)), j.text(response, ("id",))
        call_ok, response_ok = _well_formed(j, call, None), _well_formed(j, response, None)
        source_parts = (
            f"elements CROSS JOIN LATERAL jsonb_to_record(CASE WHEN {obj} THEN {v} "
            "ELSE '{}'::jsonb END) AS f(function_call jsonb, function_response jsonb)"
        )
    parts = (
        "SELECT a, u, s, ts, t, "
        f"CASE WHEN NOT {obj} THEN 'x' "
        f"WHEN {sql_true(j.present(v, ('functionCall',)))} "
        f"OR {sql_true(j.present(v, ('functionResponse',)))} THEN 'x' "
        f"WHEN {call_here} AND {response_here} THEN 'x' "
        f"WHEN {call_here} THEN 'c' WHEN {response_here} THEN 'r' END AS k, "
        + (f"CASE WHEN NOT {obj} THEN 0 ELSE "
           + " + ".join(f"(CASE WHEN {j.present(v, (key,))} THEN 1 ELSE 0 END)"
                        for key in FUNCTION_KEYS) + " END AS fk, "
           if j.text_stored else "0 AS fk, ")
        + f"CASE WHEN NOT {obj} THEN NULL "
        f"WHEN {call_here} THEN {call_id} "
        f"ELSE {response_id} END AS i, "
        f"CASE WHEN NOT {obj} THEN 0 "
        f"WHEN {call_here} THEN {call_ok} "
        f"ELSE {response_ok} END AS ok "
        # Read straight from the parts (no OFFSET 0 fence, which kept PostgreSQL from
        # planning it with parallel workers: 0.31-0.35 -> 0.24-0.29 s on 100k events).
        f"FROM {source_parts}"
    )
    if j.recomputes_ctes:
        candidates = [_candidates_read_once()]
    else:  # PostgreSQL inlines r and p (each read once here) and may scan in parallel
        candidates = [
            "SELECT a, u, s FROM r WHERE bad = 1",
            ("SELECT a, u, s FROM p WHERE k IS NOT NULL GROUP BY a, u, s, i HAVING "
             "SUM(CASE WHEN k = 'x' OR ok = 0 THEN 1 ELSE 0 END) > 0 OR " + _ID_BROKEN),
        ]
        if j.text_stored:  # a JSON-found key is always in the text too: equal sums, equal rows
            candidates.append(
                "SELECT a, u, s FROM (SELECT a, u, s, m AS n FROM r UNION ALL "
                "SELECT a, u, s, -fk FROM p) z GROUP BY a, u, s HAVING SUM(n) <> 0")
    with_candidates = (f"WITH r AS ({rows}), elements AS{j.materialized} ({elements}), "
                       f"p AS ({parts}), c AS ({' UNION '.join(candidates)}) ")
    if keys_only:
        return f"{with_candidates}SELECT a, u, s FROM c ORDER BY a, u, s"
    return (f"{with_candidates}SELECT {_selected(columns)} FROM c "
            f"{j.events_of_candidates(columns.select)} {_ordered(columns)}")


KEY_PARAMS = ("keys_app", "keys_user", "keys_session")
"""The parameters of :func:`keyed_events_query`: the keys' three columns, as arrays."""


def keyed_events_query(columns: Columns) -> str:
    """Returns PostgreSQL's query streaming the events of the sessions whose keys it is given.

    The keys come as three text arrays (:data:`KEY_PARAMS`), as
    ``candidates_query(..., keys_only=True)`` returned them; each session's
    events are read through the session index.
    """
    arrays = ", ".join(f"CAST(:{name} AS text[])" for name in KEY_PARAMS)
    return (f"SELECT {_selected(columns)} FROM unnest({arrays}) AS c(a, u, s) "
            f"{JsonbSql('postgresql').events_of_candidates(columns.select)} {_ordered(columns)}")


def _selected(columns: Columns) -> str:
    return ", ".join(f"e.{c}" for c in columns.select)


def _ordered(columns: Columns) -> str:
    return f"ORDER BY e.app_name, e.user_id, e.session_id, e.timestamp, e.{columns.tie}"


_ID_BROKEN = (
    "SUM(CASE WHEN k = 'c' THEN 1 ELSE 0 END) <> 1 "
    "OR SUM(CASE WHEN k = 'r' THEN 1 ELSE 0 END) <> 1 "
    "OR NOT COALESCE((MAX(CASE WHEN k = 'c' THEN ts END), MAX(CASE WHEN k = 'c' THEN t END))"
    " < (MIN(CASE WHEN k = 'r' THEN ts END), MIN(CASE WHEN k = 'r' THEN t END)), FALSE)"
)
"""Over one (session, id) group of parts: not one call and one later answer."""


def _candidates_read_once() -> str:
    """The candidates, reading r and p once each (for engines that compute a CTE per read).

    First per (session, id): the parts' id groups, and each row's facts in a group
    without id; then per session. A JSON-found function key is always in the text
    too, so equal sums of mentions and keys mean every row's counts are equal.
    """
    facts = ("SELECT a, u, s, CAST(NULL AS CHAR(1)) AS k, CAST(NULL AS BINARY) AS i, "
             "1 AS ok, bad, m, 0 AS fk, ts, t FROM r UNION ALL "
             "SELECT a, u, s, k, i, ok, 0, 0, fk, ts, t FROM p")
    groups = (
        "SELECT a, u, s, SUM(bad) AS nbad, SUM(m) AS nm, SUM(fk) AS nfk, "
        "SUM(CASE WHEN k = 'x' OR (k IS NOT NULL AND ok = 0) THEN 1 ELSE 0 END) AS nx, "
        f"CASE WHEN i IS NOT NULL AND ({_ID_BROKEN}) THEN 1 ELSE 0 END AS broken "
        f"FROM ({facts}) f GROUP BY a, u, s, i"
    )
    return (f"SELECT a, u, s FROM ({groups}) g GROUP BY a, u, s HAVING "
            "SUM(nbad) + SUM(nx) + SUM(broken) > 0 OR SUM(nm) <> SUM(nfk)")


FUNCTION_KEYS = ("function_call", "function_response", "functionCall", "functionResponse")
"""The keys of a part that make it a call or a response, to Python's reader."""


def _empty_parts(dialect: str) -> str:
    """A document whose ``content.parts`` is an empty array."""
    if dialect == "postgresql":
        return """'{"content": {"parts": []}}'::jsonb"""
    return """'{"content": {"parts": []}}'"""


def _well_formed(j: JsonSql, v: str, key: str | None) -> str:
    """1 when the part's call or response has a non-empty string id and a string name (if any).

    ``key``: the part's key holding the call or response; ``None`` when ``v`` is
    that call or response itself.
    """
    within = () if key is None else (key,)
    return (
        f"CASE WHEN {sql_true(j.type_is(v, (*within, 'id'), 'string'))} "  # so ``v`` is an object
        f"AND {j.text(v, (*within, 'id'))} <> '' "
        f"AND (NOT {j.present(v, (*within, 'name'))} "
        f"OR {sql_true(j.type_is(v, (*within, 'name'), 'string', 'null'))}) "
        "THEN 1 ELSE 0 END"
    )
