"""Alembic environment for adk-session-heal's own tables.

Run through :mod:`adk_session_heal.migrate`, which hands over an open
connection in ``config.attributes["connection"]`` (the Alembic cookbook's
"programmatic API use with asyncio"), already inside the transaction of the
one revision step it runs (so Alembic begins none of its own), or, for
``--sql`` (offline mode), the
URL whose dialect the SQL is written for in ``config.attributes["offline_url"]``;
no ``alembic.ini`` is needed. Revisions
are kept in their own version table, ``adk_session_heal_alembic_version``, so a
host application's Alembic history in the same database is untouched.
"""

from __future__ import annotations

from alembic import context

from adk_session_heal.store.ledger.heal_table import LEDGER_VERSION_TABLE

config = context.config
if context.is_offline_mode():  # `db upgrade --sql`: print the SQL for the URL's dialect
    url = config.attributes["offline_url"]
    context.configure(
        url=url,
        literal_binds=True,
        version_table=LEDGER_VERSION_TABLE,
        # SQLite's DDL is transactional too: its script gets BEGIN / COMMIT, as
        # PostgreSQL's does (MySQL and MariaDB commit each DDL statement).
        transactional_ddl=True if url.get_backend_name() == "sqlite" else None,
    )
else:
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError(
            "run these migrations with `adk-session-heal db upgrade URL` "
            "(adk_session_heal.migrate), which supplies the connection"
        )
    context.configure(
        connection=connection,
        target_metadata=None,
        version_table=LEDGER_VERSION_TABLE,
    )
with context.begin_transaction():
    context.run_migrations()
    if config.attributes.get("drop_version_table"):
        # `db downgrade URL base --sql`: nothing of ours is left, as online (migrate.downgrade),
        # so that the `db upgrade --sql` script, written for a database without it, runs again.
        context.execute(f"DROP TABLE {LEDGER_VERSION_TABLE}")
