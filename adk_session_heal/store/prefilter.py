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

import re
from dataclasses import dataclass

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


class _Json:
    """One engine's spelling of the JSON operations the query needs."""

    text_stored = True
    """``event_data`` is text: duplicate keys survive, so the mention count is checked."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect

    def path(self, keys: tuple[str, ...]) -> str:
        """A JSON path literal."""
        return "'$." + ".".join(keys) + "'"

    def type_is(self, doc: str, keys: tuple[str, ...], *names: str) -> str:
        """True when the value at ``keys`` is of one of the JSON types ``names``.

        Names: ``object``, ``array``, ``string``, ``number``, ``null``. An absent
        key gives NULL.
        """
        spelled = _TYPE_NAMES.get("mysql" if self._upper else self.dialect, {})
        values = ", ".join(f"'{spelling}'" for n in names for spelling in spelled.get(n, (n,)))
        if self._upper:
            values = values.upper()
        return f"{self.typeof(doc, keys)} IN ({values})"

    @property
    def _upper(self) -> bool:
        return self.dialect in ("mysql", "mariadb")

    def typeof(self, doc: str, keys: tuple[str, ...]) -> str:
        """The JSON type name of the value at ``keys`` (NULL when absent)."""
        if self.dialect == "sqlite":
            return f"json_type({doc}, {self.path(keys)})" if keys else f"json_type({doc})"
        if keys:
            return f"JSON_TYPE(JSON_EXTRACT({doc}, {self.path(keys)}))"
        return f"JSON_TYPE({doc})"

    def present(self, doc: str, keys: tuple[str, ...]) -> str:
        """True when the key exists (whatever its value, JSON null included)."""
        return f"{self.typeof(doc, keys)} IS NOT NULL"

    def is_false(self, doc: str, keys: tuple[str, ...]) -> str:
        """True when the value at ``keys`` is JSON ``false``."""
        if self.dialect == "sqlite":
            return f"{self.typeof(doc, keys)} = 'false'"
        return (f"({self.typeof(doc, keys)} = 'BOOLEAN' AND "
                f"JSON_UNQUOTE(JSON_EXTRACT({doc}, {self.path(keys)})) = 'false')")

    def text(self, doc: str, keys: tuple[str, ...]) -> str:
        """The string at ``keys`` as SQL text."""
        if self.dialect == "sqlite":
            return f"json_extract({doc}, {self.path(keys)})"
        return f"JSON_UNQUOTE(JSON_EXTRACT({doc}, {self.path(keys)}))"

    def length(self, doc: str, keys: tuple[str, ...]) -> str:
        """The length of the array at ``keys``."""
        if self.dialect == "sqlite":
            return f"json_array_length({doc}, {self.path(keys)})"
        return f"JSON_LENGTH({doc}, {self.path(keys)})"

    def readable(self, doc: str) -> str:
        """True when the column holds JSON text the other functions can read."""
        if self.dialect == "sqlite":
            return f"(typeof({doc}) = 'text' AND json_valid({doc}))"
        return f"({doc} IS NOT NULL AND JSON_VALID({doc}))"

    def exact(self, text: str) -> str:
        """``text`` compared byte for byte, as Python compares ids (MySQL's default
        collations fold case and trailing spaces)."""
        return f"CAST({text} AS BINARY)" if self._upper else text

    lateral = ","
    """What joins ``events`` to the table of its parts."""

    @property
    def materialized(self) -> str:
        """Makes SQLite store the parts read out of each row (else each use reads them again)."""
        return " MATERIALIZED" if self.dialect == "sqlite" else ""

    @property
    def recomputes_ctes(self) -> bool:
        """Whether the engine computes a CTE again at each reference (MySQL/MariaDB)."""
        return self._upper

    def events_of_candidates(self, columns: Columns) -> str:
        """Joins each candidate ``c`` to its events ``e``, read through the session index.

        The candidates come first (SQLite's CROSS JOIN, MySQL's STRAIGHT_JOIN fix
        the order): the planner's guess of their number is far too high, and a
        scan of every event would follow.
        """
        join = "CROSS JOIN" if self.dialect == "sqlite" else "STRAIGHT_JOIN"
        return (f"{join} events e ON e.app_name = c.a AND e.user_id = c.u "
                "AND e.session_id = c.s")

    def literal(self, text: str) -> str:
        """A SQL string literal (MySQL reads backslashes in literals as escapes)."""
        escaped = text.replace("'", "''")
        if self._upper:
            escaped = escaped.replace("\\", "\\\\")
        return f"'{escaped}'"

    def find(self, doc: str, word: str) -> str:
        """True when ``word`` occurs in the text (SQLite's GLOB is its fastest scan)."""
        if self.dialect == "sqlite":
            return f"{doc} GLOB {self.literal('*' + word + '*')}"
        return f"{doc} REGEXP {self.literal(re.escape(word))}"  # LOCATE took 4x as long

    def any_found(self, doc: str, words: tuple[str, ...]) -> str:
        """True when any of ``words`` occurs in the text (one scan where the engine can)."""
        if self.dialect == "sqlite":
            return "(" + " OR ".join(self.find(doc, word) for word in words) + ")"
        return f"{doc} REGEXP {self.literal('|'.join(re.escape(w) for w in words))}"

    def when_named(self, doc: str, word: str, check: str) -> str:
        """``check``, read only when the text holds ``word`` (else false, no JSON parsed)."""
        return f"({self.find(doc, word)} AND {check})"

    def foreign_escapes(self, doc: str) -> list[str]:
        """True for text holding ``\\u0020``-``\\u007f``: escaped ASCII, which ``json.dumps``
        never writes; a key spelt so (``"\\u0063ontent"``) is ``content`` to Python but
        not to every engine's path lookup, so such a row is always a candidate."""
        if self.dialect == "sqlite":
            return [f"{doc} GLOB '*\\u00[2-7]*'"]
        return [f"{doc} REGEXP {self.literal(chr(92) * 2 + 'u00[2-7]')}"]

    def mention_count(self, doc: str) -> str:
        """``, <count> AS m``: how often ``"function`` occurs in the row's text.

        Each function key a part holds (:data:`_FUNCTION_KEYS`) is one occurrence;
        more (a duplicate key, a copy elsewhere) make the session a candidate.
        """
        word = self.literal('"function')
        size = "length" if self.dialect == "sqlite" else "LENGTH"  # bytes: no scan in MySQL
        return (f", CASE WHEN {self.find(doc, chr(34) + 'function')} THEN "
                f"({size}({doc}) - {size}(REPLACE({doc}, {word}, ''))) / 9 ELSE 0 END AS m")

    def not_object(self, doc: str) -> str:
        """True when a readable document is not a JSON object."""
        if self.dialect == "sqlite":  # valid JSON that opens with a brace is an object
            return f"substr(ltrim({doc}, ' ' || char(9, 10, 13)), 1, 1) <> '{{'"
        return f"NOT {self.type_is(doc, (), 'object')}"

    def awaiting(self, doc: str) -> str:
        """True when the row may ask for a tool confirmation or a credential (``actions``'
        ``requested_tool_confirmations`` / ``requested_auth_configs`` not empty): a call
        it answers is then pending, not answered."""
        if self.dialect == "sqlite":  # one parse reads both; ADK writes {} for none
            both = (f"json_extract({doc}, '$.actions.requested_tool_confirmations', "
                    "'$.actions.requested_auth_configs')")
            return (f"({doc} GLOB '*requested[TA]*' OR COALESCE({both} NOT IN "
                    "('[{},{}]', '[null,null]', '[{},null]', '[null,{}]'), FALSE))")
        lengths = " OR ".join(
            f"COALESCE(JSON_LENGTH({doc}, '$.actions.{key}'), 0) > 0"
            for key in ("requested_tool_confirmations", "requested_auth_configs"))
        return (f"({self.find(doc, 'requestedToolConfirmations')} "
                f"OR {self.find(doc, 'requestedAuthConfigs')} OR {lengths})")

    def parts_array(self, doc: str) -> str:
        """True when ``content`` is an object whose ``parts`` is an array."""
        return self.type_is(doc, ("content", "parts"), "array")

    def actions_wrong(self, doc: str) -> str:
        """True when ``actions`` is there but neither an object nor null."""
        return _ok(f"NOT {self.type_is(doc, ('actions',), 'object', 'null')}")

    def has_value(self, v: str, key: str) -> str:
        """True when the object ``v`` holds ``key`` with a value other than JSON null."""
        return _ok(f"NOT {self.type_is(v, (key,), 'null')}")

    def plain_part(self, v: str) -> str:
        """True when a part (an object) can hold no function key: its text lacks ``unction``."""
        return f"NOT {self.find(v, 'unction')}"

    def elements(self, doc: str, alias: str) -> tuple[str, str, str]:
        """The table of the ``content.parts`` elements: (FROM item, value, value's type name)."""
        if self.dialect == "sqlite":
            return (f"json_each({doc}, '$.content.parts') AS {alias}", f"{alias}.value",
                    f"{alias}.type")
        return (f"JSON_TABLE({doc}, '$.content.parts[*]' COLUMNS (v JSON PATH '$')) "
                f"AS {alias}", f"{alias}.v", f"JSON_TYPE({alias}.v)")

    def element_type_is(self, type_expr: str, name: str) -> str:
        """True when a parts element's type (from :meth:`elements`) is ``name``."""
        return f"{type_expr} = '{name.upper() if self._upper else name}'"


class _Jsonb(_Json):
    """PostgreSQL's ``jsonb`` operators (keys are unique and decoded in ``jsonb``)."""

    text_stored = False
    lateral = " CROSS JOIN"

    def events_of_candidates(self, columns: Columns) -> str:
        """Each candidate's events, by a lateral index lookup (``OFFSET 0`` keeps the
        planner from flattening it into a sort of every event)."""
        return (f"CROSS JOIN LATERAL (SELECT {', '.join(columns.select)} FROM events "
                "WHERE app_name = c.a AND user_id = c.u AND session_id = c.s OFFSET 0) e")

    def when_named(self, doc: str, word: str, check: str) -> str:
        """``check``, read only when the document has the top-level key ``word`` names."""
        key = _TOP_LEVEL_KEYS.get(word)
        return f"({doc} ? '{key}' AND {check})" if key else check

    def not_object(self, doc: str) -> str:
        """True when the document is not an object."""
        return f"jsonb_typeof({doc}) <> 'object'"

    def foreign_escapes(self, doc: str) -> list[str]:
        """None: ``jsonb`` keys are stored decoded."""
        return []

    def mention_count(self, doc: str) -> str:
        """Zero: ``jsonb`` has no duplicate keys to hide a part behind."""
        return ", 0 AS m"

    def plain_part(self, v: str) -> str:
        """True when a part has no function key, in either case."""
        return (f"NOT ({v} ?| array['function_call', 'function_response', "
                "'functionCall', 'functionResponse'])")

    # Containment and key tests read jsonb in place; ``->`` to an object copies it out
    # (a function response may be large), so the common checks avoid it.

    def parts_array(self, doc: str) -> str:
        """Containment: ``content`` is an object whose ``parts`` is an array."""
        return f"{doc} @> '{{\"content\": {{\"parts\": []}}}}'"

    def awaiting(self, doc: str) -> str:
        """A confirmation or credential asked for (values other than ``{}`` and null)."""
        return " OR ".join(
            f"COALESCE(({self.at(doc, ('actions', key))}) NOT IN ('{{}}'::jsonb, 'null'::jsonb), "
            "FALSE)"
            for key in ("requested_tool_confirmations", "requested_auth_configs",
                        "requestedToolConfirmations", "requestedAuthConfigs"))

    def actions_wrong(self, doc: str) -> str:
        """``actions`` present, neither an object nor null."""
        return (f"({doc} ? 'actions' AND NOT ({doc} @> '{{\"actions\": {{}}}}' "
                f"OR {doc} @> '{{\"actions\": null}}'))")

    def has_value(self, v: str, key: str) -> str:
        """``key`` present and not JSON null."""
        return f"({v} ? '{key}' AND NOT {v} @> '{{\"{key}\": null}}')"

    def present(self, doc: str, keys: tuple[str, ...]) -> str:
        """True when the key exists (a top-level key: ``?``)."""
        if len(keys) == 1:
            return f"({doc} ? '{keys[0]}')"
        return f"({self.at(doc, keys)}) IS NOT NULL"

    def at(self, doc: str, keys: tuple[str, ...]) -> str:
        """The value at ``keys`` (NULL when absent), as a chain of ``->``.

        Every key is a name, never an array index, so this reads what ``#>``
        reads; ``->`` with a text key skips parsing a path array at each row
        (measured: the row checks' CPU 0.15-0.16 -> 0.14 s on 100k events).
        """
        return doc + "".join(f" -> '{key}'" for key in keys)

    def type_is(self, doc: str, keys: tuple[str, ...], *names: str) -> str:
        """True when the value at ``keys`` is of one of the JSON types ``names``."""
        return f"{self.typeof(doc, keys)} IN ({', '.join(repr(n) for n in names)})"

    def typeof(self, doc: str, keys: tuple[str, ...]) -> str:
        """The ``jsonb_typeof`` of the value at ``keys``."""
        return f"jsonb_typeof({self.at(doc, keys)})" if keys else f"jsonb_typeof({doc})"


    def is_false(self, doc: str, keys: tuple[str, ...]) -> str:
        """True when the value at ``keys`` is ``false``."""
        return f"({self.at(doc, keys)}) = 'false'::jsonb"

    def text(self, doc: str, keys: tuple[str, ...]) -> str:
        """The string at ``keys`` as text."""
        return f"({self.at(doc, keys[:-1])} ->> '{keys[-1]}')"

    def length(self, doc: str, keys: tuple[str, ...]) -> str:
        """The length of the array at ``keys``."""
        return f"jsonb_array_length({self.at(doc, keys)})"

    def readable(self, doc: str) -> str:
        """``jsonb`` is always readable JSON (SQL NULL aside)."""
        return f"({doc} IS NOT NULL)"

    def elements(self, doc: str, alias: str) -> tuple[str, str, str]:
        """``jsonb_array_elements`` over ``content.parts``."""
        return (f"LATERAL jsonb_array_elements({self.at(doc, ('content', 'parts'))}) AS {alias}(v)",
                f"{alias}.v", f"jsonb_typeof({alias}.v)")

    def element_type_is(self, type_expr: str, name: str) -> str:
        """True when a parts element's type is ``name``."""
        return f"{type_expr} = '{name}'"


def _ok(condition: str) -> str:
    """``condition`` with NULL (a key absent) read as false."""
    return f"COALESCE({condition}, FALSE)"


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
    j: _Json = _Jsonb(dialect) if dialect == "postgresql" else _Json(dialect)
    d = "event_data"
    nulls = " OR invocation_id IS NULL OR timestamp IS NULL" if columns.key_columns else ""
    parts_type = j.parts_array(d)
    content_wrong = _ok(f"NOT {j.type_is(d, ('content',), 'object', 'null')}")
    parts_wrong = _ok(f"NOT {j.type_is(d, ('content', 'parts'), 'array', 'null')}")
    # One condition per WHEN, cheapest and commonest first: a row stops at the first
    # that holds, and a healthy row pays for two or three JSON reads.
    bad = [
        f"NOT {j.readable(d)}{nulls}",
        j.not_object(d),
        f"NOT {_ok(parts_type)} AND ({content_wrong} OR {parts_wrong})",
        j.actions_wrong(d),
        j.awaiting(d),
        # Classification reads every call's time, even in a clean session: a time it
        # cannot read as a number is damage (and a number in a string is read).
        _ok(f"NOT {j.type_is(d, ('timestamp',), 'number', 'null')}"),
        *j.foreign_escapes(d),
    ]
    rare = {  # keys ADK seldom writes: read only in rows whose text names them
        "partial": _ok(f"NOT ({j.type_is(d, ('partial',), 'null')} "
                       f"OR {j.is_false(d, ('partial',))})"),
        "long_running": _ok(
            f"NOT {j.type_is(d, ('long_running_tool_ids',), 'array', 'null')} OR "
            f"(CASE WHEN {j.type_is(d, ('long_running_tool_ids',), 'array')} "
            f"THEN {j.length(d, ('long_running_tool_ids',))} > 0 END)"),
        "longRunning": _ok(j.present(d, ("longRunningToolIds",))),
        # Read for the heal marker in every response (an object, or damage).
        "custom_metadata": _ok(f"NOT {j.type_is(d, ('custom_metadata',), 'object', 'null')}"),
        "customMetadata": _ok(f"NOT {j.type_is(d, ('customMetadata',), 'object', 'null')}"),
        "ewind": _ok(f"{j.present(d, ('actions', 'rewind_before_invocation_id'))} "
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
        f"WHEN {_ok(j.present(v, ('functionCall',)))} "
        f"OR {_ok(j.present(v, ('functionResponse',)))} THEN 'x' "
        f"WHEN {call_here} AND {response_here} THEN 'x' "
        f"WHEN {call_here} THEN 'c' WHEN {response_here} THEN 'r' END AS k, "
        + (f"CASE WHEN NOT {obj} THEN 0 ELSE "
           + " + ".join(f"(CASE WHEN {j.present(v, (key,))} THEN 1 ELSE 0 END)"
                        for key in _FUNCTION_KEYS) + " END AS fk, "
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
            f"{j.events_of_candidates(columns)} {_ordered(columns)}")


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
            f"{_Jsonb('postgresql').events_of_candidates(columns)} {_ordered(columns)}")


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


_TOP_LEVEL_KEYS = {"partial": "partial", "long_running": "long_running_tool_ids",
                   "longRunning": "longRunningToolIds", "custom_metadata": "custom_metadata",
                   "customMetadata": "customMetadata"}
"""The key a rare check's word stands for, where it is a top-level key (a cheap ``?``)."""

_TYPE_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "sqlite": {"string": ("text",), "number": ("integer", "real")},
    "mysql": {"number": ("integer", "double", "decimal", "unsigned integer")},
}
"""How an engine's JSON type function names a JSON type, where not as JSON does
(MySQL/MariaDB in capitals)."""

_FUNCTION_KEYS = ("function_call", "function_response", "functionCall", "functionResponse")
"""The keys of a part that make it a call or a response, to Python's reader."""


def _empty_parts(dialect: str) -> str:
    """A document whose ``content.parts`` is an empty array."""
    if dialect == "postgresql":
        return """'{"content": {"parts": []}}'::jsonb"""
    return """'{"content": {"parts": []}}'"""


def _well_formed(j: _Json, v: str, key: str | None) -> str:
    """1 when the part's call or response has a non-empty string id and a string name (if any).

    ``key``: the part's key holding the call or response; ``None`` when ``v`` is
    that call or response itself.
    """
    within = () if key is None else (key,)
    return (
        f"CASE WHEN {_ok(j.type_is(v, (*within, 'id'), 'string'))} "  # so ``v`` is an object
        f"AND {j.text(v, (*within, 'id'))} <> '' "
        f"AND (NOT {j.present(v, (*within, 'name'))} "
        f"OR {_ok(j.type_is(v, (*within, 'name'), 'string', 'null'))}) "
        "THEN 1 ELSE 0 END"
    )
