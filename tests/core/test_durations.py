"""The one duration grammar (core/durations.py) every duration flag reads."""

from __future__ import annotations

import pytest

from adk_session_heal.core.durations import format_duration, parse_duration
from adk_session_heal.store.incremental import parse_since


def test_parse_duration() -> None:
    """Durations: plain seconds, s/m/h/d/w units, and combinations."""
    assert parse_duration("90") == 90
    assert parse_duration("1h30m") == 5400
    assert parse_duration("7d") == 7 * 86400
    assert parse_duration(" 1h 30m ") == 5400
    with pytest.raises(ValueError):
        parse_duration("1x")
    with pytest.raises(ValueError):
        parse_duration("")


def test_since_reads_the_same_grammar_and_iso_times() -> None:
    """``--since`` takes every duration the grammar takes (a bare number too), else ISO 8601."""
    now = 1_800_000_000.0
    for text in ("90", "90s", "1h30m", "2d", "1w"):
        assert parse_since(text, now) == now - parse_duration(text)
    assert parse_since("2026-11-26T09:00:00+00:00", now) == 1_795_683_600.0
    with pytest.raises(ValueError, match="give a duration"):
        parse_since("yesterday", now)


def test_format_duration_reads_back_as_a_duration() -> None:
    """Durations print in --older-than's units: exactly, or (ages) the two largest in a row."""
    samples = (0, 45, 90, 86400 + 300, 90061, 3 * 3600 + 6)
    assert [format_duration(s) for s in samples] == [
        "0s", "45s", "1m30s", "1d5m", "1d1h1m1s", "3h6s"]
    assert [format_duration(s, exact=False) for s in samples] == [
        "0s", "45s", "1m30s", "1d", "1d1h", "3h"]
    assert all(parse_duration(format_duration(s)) == s for s in samples)
