"""Dumps every row of ADK's tables exactly as stored, to prove a repair left them alone.

``python matrix_dump.py URL OUT.json`` writes ``{"tables": [...], "rows": [...]}``;
each row is ``{"table", "key", "raw"}`` where ``raw`` is the stored value in the
database's own text (PostgreSQL ``row::text``), bytes (MySQL/MariaDB
``CAST(col AS BINARY)``, hex) or Python value with its SQLite storage class,
so two dumps are equal only when every byte is. Tables of adk-session-heal
(``adk_session_heal_*``) are left out: everything else in a matrix database is
ADK's. Only the standard library and SQLAlchemy are used, so it runs in every
ADK version's environment.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

OUR_PREFIX = "adk_session_heal"


def _schema(sync: Connection) -> dict[str, tuple[list[str], list[str]]]:
    inspector = inspect(sync)
    shape = {}
    for table in sorted(inspector.get_table_names()):
        if table.startswith(OUR_PREFIX):
            continue
        columns = [c["name"] for c in inspector.get_columns(table)]
        key = inspector.get_pk_constraint(table).get("constrained_columns") or []
        shape[table] = (columns, list(key))
    return shape


def _raw(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "x" + bytes(value).hex()
    return f"{type(value).__name__}:{value!r}"


async def dump(url: str) -> dict[str, Any]:
    """Returns every row of every non-adk-session-heal table of the database at ``url``."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            shape = await conn.run_sync(_schema)
            dialect = conn.dialect.name
            quote = conn.dialect.identifier_preparer.quote
            rows: list[dict[str, Any]] = []
            for table, (columns, key) in shape.items():
                names = [quote(c) for c in columns]
                keys = ", ".join(f"CAST({quote(k)} AS CHAR)" if dialect in ("mysql", "mariadb")
                                 else quote(k) for k in key)
                if dialect == "postgresql":
                    raw_sql = f"{quote(table)}::text"
                elif dialect in ("mysql", "mariadb"):
                    raw_sql = ", ".join(f"CAST({n} AS BINARY)" for n in names)
                else:
                    raw_sql = ", ".join(f"typeof({n}), {n}" for n in names)
                select = f"SELECT {keys + ', ' if keys else ''}{raw_sql} FROM {quote(table)}"
                result = await conn.execute(text(select))
                for record in result:
                    values = list(record)
                    key_values = {k: str(v) for k, v in zip(key, values[:len(key)], strict=True)}
                    raw = " | ".join(_raw(v) for v in values[len(key):])
                    rows.append({"table": table, "key": key_values, "raw": raw})
            rows.sort(key=lambda r: (r["table"], r["raw"]))
            return {"dialect": dialect, "tables": sorted(shape), "rows": rows}
    finally:
        await engine.dispose()


def main() -> None:
    """Writes the dump of ``argv[1]`` to the file ``argv[2]``."""
    url, out = sys.argv[1], sys.argv[2]
    document = asyncio.run(dump(url))
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(document, handle)


if __name__ == "__main__":
    main()
