"""Every ledger table (private): the heal ledger, the tool-run ledger, their migrations.

``heal_ledger`` / ``heal_table`` (one row per heal), ``tool_run_sql`` /
``tool_run_redis`` (one record per tool call), ``ledger_base`` (what they
share), ``migrations`` and ``migration_ops`` with the Alembic scripts in
``alembic/``. Public through
:mod:`adk_session_heal.ledger` and :mod:`adk_session_heal.migrate`; these modules
may change.
"""
