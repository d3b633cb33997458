"""How heals become visible to operators: one log record, and the callback.

Every heal written (by the wrapper or the repair CLI) is reported here exactly
once: one WARNING record on the ``adk_session_heal`` logger, carrying the
heal's fields under ``record.adk_session_heal`` for structured handlers, and
one call of the user's ``on_heal`` callback. Never one per request: a session
that is already healed reports nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .records import HealRecord

__all__ = ["report_heal"]

logger = logging.getLogger("adk_session_heal")


def report_heal(record: HealRecord, on_heal: Callable[[HealRecord], object] | None = None) -> None:
    """Logs one heal and passes it to ``on_heal``.

    Args:
        record: The heal written.
        on_heal: The user's callback; an exception it raises is logged with its
            traceback and swallowed, so metrics can never break a session read.
    """
    logger.warning(
        "adk_session_heal: healed %d dead tool call(s) %s (%s) in app=%s user=%s session=%s"
        " with synthetic event %s [%s]",
        len(record.call_ids),
        ", ".join(f"{name}#{call_id}" for name, call_id in zip(record.tool_names,
                                                              record.call_ids, strict=True)),
        record.reason,
        record.app_name,
        record.user_id,
        record.session_id,
        record.synthetic_event_id,
        record.trigger.value,
        extra={"adk_session_heal": record.log_fields()},
    )
    if on_heal is None:
        return
    try:
        on_heal(record)
    except Exception:
        logger.exception("adk_session_heal: the on_heal callback raised; heal %s kept",
                         record.synthetic_event_id)
