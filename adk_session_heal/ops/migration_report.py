"""The ``db`` commands' JSON documents (``--json``), as plain dicts.

Like the other JSON documents (:mod:`adk_session_heal.ops.scan_report`), each
carries ``"version": 1`` (and the same number as ``"format"``) and its
``"command"``; fields are only ever added under
that number. ``url`` is always redacted (no password); ``dialect`` is
``"sqlite"``, ``"postgresql"``, ``"mysql"`` or ``"mariadb"``, from the URL.

``db upgrade`` and ``db downgrade``::

    {"version": 1, "format": 1, "command": "db upgrade", "url": "<redacted>",
     "dialect": "postgresql", "target": "head", "revision": "0001",
     "head": "0001", "sql": null}

``target`` is the revision asked for, as given; ``revision`` the heal ledger's
revision afterwards (``null``: base, no ledger tables). With ``--sql`` nothing
is run: ``sql`` is the script (a string) and ``revision`` the revision the
script leaves the database at.

``db current``::

    {"version": 1, "format": 1, "command": "db current", "url": "<redacted>",
     "dialect": "sqlite", "revision": null, "head": "0001", "up_to_date": false}

``db history`` (``url``, ``dialect`` and ``current`` are ``null``, and each
revision's ``current`` too, when no URL is given)::

    {"version": 1, "format": 1, "command": "db history", "url": null, "dialect": null,
     "head": "0001", "current": null, "revisions": [REVISION, ...]}

    REVISION = {"id": "0001", "down_revision": null,
                "message": "The heal ledger: ...", "head": true, "current": null}

``revisions`` is newest first; ``down_revision`` ``null`` marks the first.
"""

from __future__ import annotations

from typing import Any, Literal

from ..store.ledger.migrations import Revision
from ..store.urls import StoreUrl
from .json_version import JSON_FORMAT


def migration_json(command: Literal["db upgrade", "db downgrade"], url: StoreUrl, *,
                   target: str, revision: str | None, head: str,
                   sql: str | None) -> dict[str, Any]:
    """Returns the ``db upgrade --json`` / ``db downgrade --json`` document."""
    return {
        "version": JSON_FORMAT,
        "format": JSON_FORMAT,
        "command": command,
        "url": url.redacted,
        "dialect": url.backend,
        "target": target,
        "revision": revision,
        "head": head,
        "sql": sql,
    }


def current_json(url: StoreUrl, *, revision: str | None, head: str) -> dict[str, Any]:
    """Returns the ``db current --json`` document."""
    return {
        "version": JSON_FORMAT,
        "format": JSON_FORMAT,
        "command": "db current",
        "url": url.redacted,
        "dialect": url.backend,
        "revision": revision,
        "head": head,
        "up_to_date": revision == head,
    }


def history_json(revisions: list[Revision], *, url: StoreUrl | None,
                 current: str | None) -> dict[str, Any]:
    """Returns the ``db history --json`` document (``url=None``: no database read)."""
    known = url is not None
    return {
        "version": JSON_FORMAT,
        "format": JSON_FORMAT,
        "command": "db history",
        "url": url.redacted if url is not None else None,
        "dialect": url.backend if url is not None else None,
        "head": next(r.id for r in revisions if r.head),
        "current": current,
        "revisions": [
            {
                "id": r.id,
                "down_revision": r.down_revision,
                "message": r.message,
                "head": r.head,
                "current": (r.id == current) if known else None,
            }
            for r in revisions
        ],
    }
