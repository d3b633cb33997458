"""Odd but legal calls: ids shared by parallel calls, empty names, ids reused across invocations.

Each heal must answer every dead call once and leave a history every provider rule
accepts (and that ADK's LiteLlm adapter converts) whenever the calls themselves allow it,
and must never make the request ADK builds worse (the seeded fuzz at the end, over
``tests/adk_matrix/odd_histories.py``, which the reader matrix also runs against each
supported ADK). Calls a heal would make worse are covered in ``test_unhealable.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import pytest
from google.adk.events.event import Event
from heal_lists import NOW, heal
from paths import TESTS

from adk_session_heal.core.findings import CallStatus, classify
from adk_session_heal.providers.validators import PROVIDERS, provider_problems
from adk_session_heal.testing import History

sys.path.insert(0, str(TESTS / "adk_matrix"))

from odd_histories import compare, describe, harms, seeded_ops  # noqa: E402

ODD_HISTORIES = int(os.environ.get("ODD_HISTORIES", "10000"))
"""Seeded histories the fuzz below builds (``ODD_HISTORIES=100000`` for a long hunt)."""

LITELLM_HISTORIES = int(os.environ.get("ODD_LITELLM_HISTORIES", "2000"))
"""Of those, how many also go through ADK's LiteLlm adapter (slower: about 4x)."""


def all_problems(events: list[Event]) -> dict[str, list[str]]:
    """Problem codes per provider."""
    return {p: [x.code for x in provider_problems(events, p)] for p in PROVIDERS}


def test_parallel_calls_sharing_an_id_both_answered_are_not_dead() -> None:
    """Two responses with the shared id answer the two calls, one each: nothing to heal."""
    h = History(start=NOW - 1000)
    h.user("two things")
    h.calls("a", "b", ids=["x", "x"])
    h.respond(("x", "a"), ("x", "b"))
    h.user("next")
    statuses = [c.status for c in classify(h.events, now=NOW).calls]
    assert statuses == [CallStatus.ANSWERED, CallStatus.ANSWERED]
    assert heal(h.events) == h.events


def test_ids_reused_across_invocations_heal_only_the_dead_occurrence() -> None:
    """An id answered in one invocation and reused by a dead call later: one heal, for the later."""
    h = History(start=NOW - 1000)
    h.user("q")
    h.call("f", call_id="r")
    h.respond(("r", "f"))
    h.text("ok")
    h.user("again")
    h.call("f", call_id="r")
    h.user("next")
    healed = heal(h.events)
    assert [e.id for e in healed] == [*(e.id for e in h.events[:6]), f"{h.events[5].id}-heal",
                                      h.events[6].id]
    assert all_problems(h.events)["anthropic"] == ["unanswered_call"]
    assert all_problems(healed) == {p: [] for p in PROVIDERS}


def _fuzz(count: int, *, litellm: bool) -> tuple[int, list[str]]:
    """Compares ``count`` seeded histories; returns how many were healed and what got worse."""
    async def run() -> tuple[int, list[str]]:
        healed, worse = 0, []
        for seed in range(count):
            ops, stale_after = seeded_ops(seed)
            comparison = await compare(ops, stale_after, litellm=litellm)
            healed += comparison.heals > 0
            harm = harms(comparison)
            if harm:
                worse.append(f"history {seed} {ops!r}: {harm}\n{describe(comparison.healed)}")
        return healed, worse

    logging.disable(logging.WARNING)  # ADK warns of every call it drops and result it pads
    try:
        return asyncio.run(run())
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.slow
def test_healing_never_makes_the_request_adk_builds_worse() -> None:
    """10,000 seeded odd histories, each followed by the user's next message: the request the
    installed ADK builds after healing is refused by no provider that accepted it before, and
    names no call that it showed unharmed before."""
    healed, worse = _fuzz(ODD_HISTORIES, litellm=False)
    assert not worse, f"{len(worse)} of {ODD_HISTORIES} made worse; first:\n{worse[0]}"
    assert healed > ODD_HISTORIES // 10  # the fuzz heals, it does not only leave alone


@pytest.mark.slow
def test_healing_never_makes_what_litellm_sends_worse(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same through ADK's LiteLlm adapter: never a refusal (a call without a name) or an
    OpenAI Chat problem that the request without healing did not have."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no cost-map download
    healed, worse = _fuzz(LITELLM_HISTORIES, litellm=True)
    assert not worse, f"{len(worse)} of {LITELLM_HISTORIES} made worse; first:\n{worse[0]}"
    assert healed > LITELLM_HISTORIES // 10
