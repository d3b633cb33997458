"""Tests for core/idempotency.py: one key per function call, the same on every run of it."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adk_session_heal.core.idempotency import KEY_LENGTH, idempotency_key
from adk_session_heal.core.session_key import SessionKey

SESSION = SessionKey("shop", "customer", "order-1")


def test_the_key_is_forty_hexadecimal_characters_and_stable() -> None:
    """The same call gives the same 40 hex characters, here and in any other process."""
    key = idempotency_key(SESSION, "e-1", "call-1")
    assert re.fullmatch(r"[0-9a-f]{40}", key) and KEY_LENGTH == 40
    assert key == idempotency_key(SessionKey("shop", "customer", "order-1"), "e-1", "call-1")
    # Pinned: a change of the rule must not quietly change the keys a tool already sent.
    assert key == "c623b18543e14ae345db8c9507fa56efaa327ba4"


@pytest.mark.parametrize("other", [
    (SessionKey("shop2", "customer", "order-1"), "e-1", "call-1"),
    (SessionKey("shop", "customer2", "order-1"), "e-1", "call-1"),
    (SessionKey("shop", "customer", "order-2"), "e-1", "call-1"),
    (SESSION, "e-2", "call-1"),
    (SESSION, "e-1", "call-2"),
])
def test_every_part_of_the_call_changes_the_key(other: tuple[SessionKey, str, str]) -> None:
    """Another app, user, session, invocation or call id: another key."""
    assert idempotency_key(*other) != idempotency_key(SESSION, "e-1", "call-1")


_PARTS = st.tuples(*[st.text(alphabet="ab:0", max_size=3)] * 4, st.text(alphabet="ab:0",
                                                                           min_size=1, max_size=3))


@given(_PARTS, _PARTS)
def test_two_calls_share_a_key_only_when_they_are_the_same_call(
        first: tuple[str, ...], second: tuple[str, ...]) -> None:
    """Parts that run together differently (``"a" + "b:0"`` and ``"a:" + "b0"``) keep apart."""
    def key(parts: tuple[str, ...]) -> str:
        return idempotency_key(SessionKey(*parts[:3]), parts[3], parts[4])

    assert (key(first) == key(second)) == (first == second)


def test_a_call_without_an_id_has_no_key() -> None:
    """An empty call id cannot be told from another call's: refused."""
    with pytest.raises(ValueError, match="without an id"):
        idempotency_key(SESSION, "e-1", "")
