"""The one duration grammar: ``90``, ``90s``, ``30m``, ``24h``, ``7d``, ``1w``, ``1h30m``.

:func:`parse_duration` reads it; :func:`format_duration` writes it (what the
command line prints, and the defaults its help shows).

Every flag that takes a duration (``--older-than``, ``--clock-skew``,
``--since``, ``--timeout``) reads it with :func:`parse_duration`; ``--since``
also takes an ISO 8601 time (:func:`~adk_session_heal.store.incremental.parse_since`).
"""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """Parses ``90``, ``90s``, ``30m``, ``24h``, ``7d``, ``1w`` or ``1h30m`` into seconds.

    A bare number is seconds; spaces are ignored; units add up.

    Raises:
        ValueError: The text is not a duration.
    """
    compact = text.strip().lower().replace(" ", "")
    matches = list(_DURATION.finditer(compact))
    if not compact or "".join(m.group(0) for m in matches) != compact:
        raise ValueError(f"{text!r} is not a duration (examples: 90s, 30m, 24h, 7d)")
    return sum(float(m.group(1)) * _UNITS[m.group(2)] for m in matches)


def format_duration(seconds: float, *, exact: bool = True) -> str:
    """Returns ``seconds`` in the units ``--older-than`` takes: ``45s``, ``24h5m``, ``1d2h``.

    Args:
        seconds: The duration (negative counts as 0; fractions are dropped).
        exact: Every non-zero unit (``90061`` is ``1d1h1m1s``); ``False``: the
            largest unit and, if not zero, the next one (``1d1h``), for ages.
    """
    rest = max(0, int(seconds))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
        if parts and not exact and (len(parts) == 2 or not count):
            break
    return "".join(parts) or "0s"
