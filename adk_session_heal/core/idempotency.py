"""An idempotency key per tool call: the same for every run of one call, new for every other.

A tool whose side effect goes through an API that deduplicates requests by a
key (payment providers, email senders, ticketing systems) passes this key, and
the API then applies the effect at most once however often the call runs: a
run cut short by a crash and run again by ADK's resume (the same
function-call id, read back from the stored call event), or again by
``RerunSafeCallsPlugin``, sends the same key; the model's own retry is a new
call with a new id, so it gets a new key, as it should.

The key names the call where it was made: the session, the invocation of the
model's call event, and the function-call id. The invocation keeps two calls
apart that a model gave the same id in different turns (some models number
their calls from ``call_0`` every turn); within one invocation, ADK and the
providers keep call ids unique.
"""

from __future__ import annotations

import hashlib

from .session_key import SessionKey

KEY_LENGTH = 40
"""Characters in a key: hexadecimal, 160 bits (short enough for APIs that cap keys at 45)."""

_VERSION = "adk-session-heal idempotency key 1"
"""Part of every key's input: a later change of the rule must not reuse old keys."""


def idempotency_key(session: SessionKey, invocation_id: str, call_id: str) -> str:
    """Returns the key of one function call.

    Args:
        session: The session the call was made in.
        invocation_id: The invocation of the model's event that made the call.
        call_id: The function-call id.

    Raises:
        ValueError: ``call_id`` is empty (a call without an id cannot be
            told from another).
    """
    if not call_id:
        raise ValueError("a function call without an id has no idempotency key")
    parts = (_VERSION, session.app_name, session.user_id, session.session_id, invocation_id,
             call_id)
    # Each part's length first: no two different calls can spell the same input.
    text = "".join(f"{len(part)}:{part}" for part in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_LENGTH]
