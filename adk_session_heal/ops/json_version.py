"""The version every JSON document and JSONL line of the command line carries.

Kept apart from the reports so the command line can name it in its ``--help``
without importing them (and ADK with them). Keys are only ever added within a
version.
"""

from __future__ import annotations

JSON_FORMAT = 1
"""``"version"`` of the scan, repair, history and db documents."""
