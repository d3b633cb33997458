"""Clients of a Redis server, shared by the Redis layout and its ledgers.

redis-py is imported on first use, with the one-line error that says how to
get it where it is missing (:func:`import_redis_asyncio`, :func:`redis_errors`);
a client opened for a ``redis://`` URL (:func:`redis_client_for`), values read
as text whether or not the client decodes them (:func:`as_text`), and a client
closed across redis-py versions (:func:`close_client`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..errors import UnsupportedStoreError
from .driver_errors import import_driver
from .urls import StoreUrl


def import_redis_asyncio(url: StoreUrl | None = None) -> ModuleType:
    """Imports ``redis.asyncio``, or raises the one-line error that says how to get it."""
    return import_driver("redis.asyncio", url)


def redis_errors() -> tuple[type[Exception], type[Exception]]:
    """Returns redis-py's ``(RedisError, WatchError)``."""
    import_redis_asyncio()
    from redis.exceptions import RedisError, WatchError

    return RedisError, WatchError


def as_text(value: str | bytes | None) -> str | None:
    """A value or key as text (the client may or may not decode responses)."""
    return value.decode() if isinstance(value, bytes) else value


async def close_client(client: Any) -> None:
    """Closes a ``redis.asyncio`` client (``aclose`` from redis-py 5.0.1, ``close`` before)."""
    close = getattr(client, "aclose", None) or client.close  # aclose: redis-py 5.0.1+
    await close()


def redis_client_for(url: str | StoreUrl) -> tuple[Any, str]:
    """A new ``redis.asyncio`` client (decoding responses) and ADK's key prefix for a URL.

    Raises:
        UnsupportedStoreError: The URL is not a Redis one.
    """
    from .urls import parse_store_url

    store_url = url if isinstance(url, StoreUrl) else parse_store_url(url)
    if store_url.backend != "redis":
        raise UnsupportedStoreError(f"{store_url} is not a Redis URL")
    client = import_redis_asyncio().from_url(store_url.redis_url(), decode_responses=True)
    return client, store_url.redis_key_prefix

