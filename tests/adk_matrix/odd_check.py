"""Does healing ever make the request this ADK builds worse? Seeded odd histories, each ADK.

``python odd_check.py [count]`` (with adk-session-heal installed beside that
ADK): builds ``count`` seeded histories (default ``ADK_MATRIX_ODD_HISTORIES``
or 3,000) with :mod:`odd_histories` (empty names, ids shared within an event
and reused across events, id-less, long-running and confirmed calls, orphaned
responses, text replies between calls, odd clock steps), each followed by the
user's next message, heals each with the package's pure core, and builds the
next model request from the history before and after healing with this ADK's
own contents builder (``_get_contents``: 1.x and 2.0-2.9 keep unanswered calls,
2.10+ leave them out). Each provider's validator reads both requests, and ADK's
LiteLlm adapter too when litellm is installed beside it (the matrix
environments have none; ``tests/core/test_odd_calls.py`` runs it with the newest
ADK). Prints one JSON line: the ADK version, how many histories, how many were
healed, and which checks ran. Exits 1 at the first history where a request
accepted before healing is refused after it, or where a call the request showed
unharmed before is named by a problem after.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from matrix_adk import emit, fail  # noqa: E402
from odd_histories import compare, describe, harms, seeded_ops  # noqa: E402

from adk_session_heal.core.adk_compat import ADK_VERSION  # noqa: E402


async def main(count: int) -> None:
    """Compares ``count`` histories; fails at the first one healing made worse."""
    litellm = importlib.util.find_spec("litellm") is not None
    healed = 0
    for seed in range(count):
        ops, stale_after = seeded_ops(seed)
        comparison = await compare(ops, stale_after, litellm=litellm)
        healed += comparison.heals > 0
        harm = harms(comparison)
        if harm:
            fail(f"history {seed} ({ops!r}): healing made the request worse: {harm}\n"
                 f"{describe(comparison.healed)}")
    emit({"adk": ".".join(map(str, ADK_VERSION)), "histories": count, "healed": healed,
          "litellm": litellm})


if __name__ == "__main__":
    logging.disable(logging.WARNING)  # ADK warns of every call it drops and result it pads
    default = int(os.environ.get("ADK_MATRIX_ODD_HISTORIES", "3000"))
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else default))
