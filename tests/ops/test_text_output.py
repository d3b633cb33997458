"""The reports as text, pure: TSV fields, durations, the "why" of a call."""

from __future__ import annotations

from adk_session_heal.ops.text_output import call_why, tsv_field


def test_tsv_field_escapes_and_flattens() -> None:
    """null is empty, booleans lower case, lists comma-joined, objects compact JSON,
    and tab, newline, CR and backslash escaped so one record stays one line."""
    assert [tsv_field(v) for v in (None, True, False, 1.5, ["a", "b"], {"k": [1]})] == [
        "", "true", "false", "1.5", "a,b", '{"k":[1]}']
    assert tsv_field("a\tb\nc\rd\\e") == "a\\tb\\nc\\rd\\\\e"


def test_why_each_call_is_or_is_not_healed() -> None:
    """Each status gets one line; an in-flight call names the age at which it would be dead."""
    dead_after = 86400.0 + 300.0
    assert "later invocation" in call_why("superseded", None, dead_after)
    assert "1d5m" in call_why("stale", None, dead_after)
    assert "younger than 1d5m" in call_why("in_flight", None, dead_after)
    assert "never healed" in call_why("in_flight", None, None)
    assert "confirmation" in call_why("pending", "awaiting_confirmation_or_credential", None)
    assert "no call id" in call_why("id_less", None, None)
