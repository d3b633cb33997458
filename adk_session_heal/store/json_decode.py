"""Decoding stored JSON: what :func:`json.loads` returns, about twice as fast.

Scans spend much of their time decoding ``event_data`` (100,000 events: about
0.25 s of a 0.65 s SQLite scan, measured). :func:`loads` decodes with
msgspec's C decoder and, whenever msgspec refuses a text, with :func:`json.loads`
itself, so the result is always the standard library's: msgspec refuses what
it cannot represent the way ``json`` does (``NaN``, ``Infinity``, numbers
beyond the float range, lone surrogates) and decodes everything else to equal
values of equal types, integers of any size included (``tests/store/test_json_decode.py``
checks both on generated and hand-picked texts). ADK decodes the same columns
with :func:`json.loads` (through SQLAlchemy), so what we read is what ADK reads.

The one difference left is where Python's recursion limit falls: both stop
near 1,000 nested levels, a few levels apart, and where exactly depends on the
caller's own stack depth for either decoder.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_fast = msgspec.json.Decoder().decode
_slow = json.loads


def loads(text: str | bytes) -> Any:
    """Decodes one JSON text exactly as :func:`json.loads` would.

    Args:
        text: The JSON text.

    Returns:
        The decoded value.

    Raises:
        ValueError: The text is not JSON (:class:`json.JSONDecodeError`), as
            :func:`json.loads` raises it.
        RecursionError: It is nested too deeply to decode.
    """
    try:
        return _fast(text)
    except (ValueError, RecursionError):  # msgspec's errors are ValueErrors
        return _slow(text)
