"""One adapter per ADK storage layout (private): the only writer of each layout.

``sql_tables`` (``DatabaseSessionService``), ``adk_sqlite`` (``SqliteSessionService``),
``memory`` (``InMemorySessionService``), ``redis_sessions`` (``RedisSessionService``)
and ``append`` (any other service, through ``append_event``). The wrapper and the
command line write through the same adapter; these modules may change.
"""
