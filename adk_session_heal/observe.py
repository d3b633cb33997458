"""How heals become visible to operators: a log record, metrics, a span, the callback.

Every heal written (by the wrapper or the repair CLI) is reported here exactly
once, never once per request: a session that is already healed reports
nothing. One report is:

* one WARNING record on the ``adk_session_heal`` logger, carrying the heal's
  fields under ``record.adk_session_heal`` for structured handlers (a repair
  run logs each heal at DEBUG instead, and one summary line per run with its
  counts by reason and outcome, :func:`report_repair_run`: a 300k-heal run
  is one line, not 300k);
* OpenTelemetry, through ``opentelemetry-api`` (a no-op until an SDK is
  configured, as ADK's own telemetry is):

  - counter ``adk_session_heal.heals`` (one per synthetic event), attributes
    ``app_name``, ``reason``, ``trigger``;
  - counter ``adk_session_heal.healed_calls`` (one per dead call answered),
    the same attributes plus ``tool_name``;
  - counter ``adk_session_heal.dead_calls`` (one per dead call dealt with),
    attributes ``app_name``, ``reason``, ``trigger``, ``tool_name``,
    ``tool_effect``, ``outcome`` and ``resolution`` (what happened to the
    call: ``healed``, ``recovered`` (its real result, from the tool-run
    ledger), ``superseded`` (its real response arrived after the heal, which
    was taken back out: :func:`report_removal`), ``re-run`` (run again by
    :class:`~adk_session_heal.runtime.rerun_plugin.RerunSafeCallsPlugin`:
    :func:`report_rerun`); the value set is open);
  - span ``adk_session_heal.heal`` (child of the current span, e.g. the
    ``invoke_workflow`` span of the ADK run storing its first event),
    attributes ``adk_session_heal.*`` with the session, event and call ids;
  - span ``adk_session_heal.dead_call``, one per dead call, a child of the
    heal's span, with the call's id, tool, effect, outcome and resolution.

  Metric attributes never hold user, session or call ids, so their
  cardinality stays that of apps x tools;
* one call of the user's ``on_heal`` callback.

A heal taken back out (a late result) is reported once too
(:func:`report_removal`): one WARNING record, a ``dead_calls`` count and a
``dead_call`` span per call with resolution ``superseded``.

Neither telemetry nor the callback can fail a session read: their errors are
logged with the traceback and swallowed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .core.heal_record import HealRecord

if TYPE_CHECKING:  # OpenTelemetry is imported by the first heal reported, not by a scan
    from opentelemetry import metrics, trace

    from .store.base import Removal

__all__ = [
    "DEAD_CALLS_METRIC",
    "DEAD_CALL_SPAN",
    "HEALED_CALLS_METRIC",
    "HEALS_METRIC",
    "HEAL_SPAN",
    "RESOLUTION_HEALED",
    "RESOLUTION_RECOVERED",
    "RESOLUTION_RERUN",
    "RESOLUTION_SUPERSEDED",
    "report_heal",
    "report_removal",
    "report_rerun",
    "report_repair_run",
    "set_telemetry_providers",
]

logger = logging.getLogger("adk_session_heal")

INSTRUMENTATION_NAME = "adk_session_heal"
HEALS_METRIC = "adk_session_heal.heals"
"""Counter: heals written (synthetic response events)."""
HEALED_CALLS_METRIC = "adk_session_heal.healed_calls"
"""Counter: dead tool calls answered by a heal."""
HEAL_SPAN = "adk_session_heal.heal"
"""Span recorded per heal."""
DEAD_CALLS_METRIC = "adk_session_heal.dead_calls"
"""Counter: dead tool calls dealt with, by tool, effect, outcome and resolution."""
DEAD_CALL_SPAN = "adk_session_heal.dead_call"
"""Span recorded per dead call, a child of its heal's span."""
RESOLUTION_HEALED = "healed"
"""The ``resolution`` of a dead call answered by a synthetic error response."""
RESOLUTION_RECOVERED = "recovered"
"""The ``resolution`` of a dead call answered with its tool's real result (tool-run ledger)."""
RESOLUTION_RERUN = "re-run"
"""The ``resolution`` of a dead call run again (``read_only``/``idempotent``) instead of healed."""
RESOLUTION_SUPERSEDED = "superseded"
"""The ``resolution`` of a healed call whose real response arrived later (the heal removed)."""


@dataclass(frozen=True)
class _Instruments:
    heals: metrics.Counter
    healed_calls: metrics.Counter
    dead_calls: metrics.Counter
    tracer: trace.Tracer

    @classmethod
    def create(
        cls,
        meter_provider: metrics.MeterProvider | None,
        tracer_provider: trace.TracerProvider | None,
    ) -> _Instruments:
        # Without explicit providers the global ones are used; before an SDK is
        # configured they are proxies that start forwarding once it is.
        from opentelemetry import metrics, trace

        meter = metrics.get_meter(INSTRUMENTATION_NAME, meter_provider=meter_provider)
        return cls(
            heals=meter.create_counter(
                HEALS_METRIC, unit="{heal}", description="Heals written: synthetic "
                "response events answering dead tool calls."
            ),
            healed_calls=meter.create_counter(
                HEALED_CALLS_METRIC, unit="{call}",
                description="Dead tool calls answered by a synthetic response.",
            ),
            dead_calls=meter.create_counter(
                DEAD_CALLS_METRIC, unit="{call}",
                description="Dead tool calls dealt with, by tool effect, outcome and "
                "resolution (healed, ...).",
            ),
            tracer=trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=tracer_provider),
        )


_instruments: _Instruments | None = None


def set_telemetry_providers(
    meter_provider: metrics.MeterProvider | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> None:
    """Sends heal metrics and spans to these providers instead of the global ones.

    Not needed when your application configures the global OpenTelemetry
    providers (``metrics.set_meter_provider`` / ``trace.set_tracer_provider``,
    or ADK's own telemetry setup): heals use those by default.

    Args:
        meter_provider: Where the counters go (``None``: the global provider).
        tracer_provider: Where the spans go (``None``: the global provider).
    """
    global _instruments
    _instruments = _Instruments.create(meter_provider, tracer_provider)


def _current_instruments() -> _Instruments:
    global _instruments
    if _instruments is None:
        _instruments = _Instruments.create(None, None)
    return _instruments


_SPAN_KEYS = ("app_name", "session_id", "invocation_id", "call_event_id", "synthetic_event_id",
              "reason", "trigger")
"""The fields of a heal record (:meth:`HealRecord.to_json`) its spans carry."""


_LOGGED = ("app_name", "user_id", "session_id", "call_event_id", "synthetic_event_id",
           "invocation_id", "call_ids", "tool_names", "reason", "trigger")
"""The fields of a heal record (:meth:`HealRecord.to_json`) its log line carries, with each
call's effect and outcome."""


def _record_telemetry(record: HealRecord, data: Mapping[str, Any]) -> None:
    instruments = _current_instruments()
    attributes = {
        "app_name": record.app_name,
        "reason": record.reason,
        "trigger": record.trigger.value,
    }
    instruments.heals.add(1, attributes)
    for tool_name in record.tool_names:
        instruments.healed_calls.add(1, {**attributes, "tool_name": tool_name})
    start = int(record.healed_at * 1e9)
    shared = {f"adk_session_heal.{key}": data[key] for key in _SPAN_KEYS}
    span = instruments.tracer.start_span(
        HEAL_SPAN,
        start_time=start,
        attributes={
            **shared,
            "adk_session_heal.user_id": record.user_id,
            "adk_session_heal.call_ids": list(record.call_ids),
            "adk_session_heal.tool_names": list(record.tool_names),
        },
    )
    try:
        _record_dead_calls(instruments, record, attributes, shared, span, start)
    finally:
        span.end(end_time=max(start, time.time_ns()))


def _record_dead_calls(
    instruments: _Instruments,
    record: HealRecord,
    attributes: Mapping[str, str],
    shared: Mapping[str, str],
    heal_span: trace.Span,
    start: int,
) -> None:
    """Counts each dead call of a heal and records its span under the heal's.

    ``shared``: the span attributes every span of the heal carries.
    """
    from opentelemetry import trace

    parent = trace.set_span_in_context(heal_span)
    for call_id, tool_name, effect, outcome, recovered in zip(
        record.call_ids, record.tool_names, record.call_effects, record.call_outcomes,
        record.call_recovered, strict=True,
    ):
        resolution = RESOLUTION_RECOVERED if recovered else RESOLUTION_HEALED
        instruments.dead_calls.add(1, {
            **attributes,
            "tool_name": tool_name,
            "tool_effect": effect,
            "outcome": outcome,
            "resolution": resolution,
        })
        span = instruments.tracer.start_span(
            DEAD_CALL_SPAN,
            context=parent,
            start_time=start,
            attributes={
                **shared,
                "adk_session_heal.call_id": call_id,
                "adk_session_heal.tool_name": tool_name,
                "adk_session_heal.tool_effect": effect,
                "adk_session_heal.outcome": outcome,
                "adk_session_heal.resolution": resolution,
            },
        )
        span.end(end_time=max(start, time.time_ns()))


def report_heal(
    record: HealRecord,
    on_heal: Callable[[HealRecord], object] | None = None,
    *,
    data: Mapping[str, Any],
    level: int = logging.WARNING,
) -> None:
    """Logs one heal, counts it, traces it, and passes it to ``on_heal``.

    Args:
        record: The heal written.
        on_heal: The user's callback; an exception it raises is logged with its
            traceback and swallowed, so metrics can never break a session read.
        data: The record's one encoding (:meth:`HealRecord.to_json`; a written
            heal's :attr:`~adk_session_heal.core.healing.Heal.record_json`,
            which its ledger row was made from): the log's fields and the
            spans' are read from it.
        level: The log record's level (a repair run passes ``DEBUG`` and logs
            its summary with :func:`report_repair_run`).
    """
    if logger.isEnabledFor(level):  # a repair's DEBUG records: built only when kept
        _log_heal(record, data, level)
    try:
        _record_telemetry(record, data)
    except Exception:  # an SDK or exporter bug must not fail the session read
        logger.exception("adk_session_heal: recording telemetry for heal %s failed; heal kept",
                         record.synthetic_event_id)
    if on_heal is None:
        return
    try:
        on_heal(record)
    except Exception:
        logger.exception("adk_session_heal: the on_heal callback raised; heal %s kept",
                         record.synthetic_event_id)


def _log_heal(record: HealRecord, data: Mapping[str, Any], level: int) -> None:
    """Logs one heal at ``level``, its fields under ``record.adk_session_heal``.

    The fields are ``data``'s (the record's :meth:`~HealRecord.to_json`) that
    :data:`_LOGGED` names, with each call's effect and outcome.
    """
    logger.log(
        level,
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
        extra={"adk_session_heal": {
            **{key: data[key] for key in _LOGGED},
            "effects": list(record.call_effects), "outcomes": list(record.call_outcomes)}},
    )


def report_removal(
    removal: Removal, tool_names: Mapping[str, str], *, level: int = logging.WARNING
) -> None:
    """Logs, counts and traces one heal taken back out of storage.

    Args:
        removal: The removal done.
        tool_names: Each call id's tool, as the heal's marker names it.
        level: The log record's level (a repair run passes ``DEBUG``).
    """
    key = removal.key
    logger.log(
        level,
        "adk_session_heal: took back heal %s in app=%s user=%s session=%s: the real"
        " response(s) of %s arrived (%s)",
        removal.event_id, key.app_name, key.user_id, key.session_id,
        ", ".join(f"{tool_names.get(c, '')}#{c}" for c in removal.call_ids),
        removal.reason.value,
        extra={"adk_session_heal": {
            "app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id,
            "synthetic_event_id": removal.event_id, "call_event_id": removal.call_event_id,
            "call_ids": list(removal.call_ids), "removal_reason": removal.reason.value,
            "superseded_by": list(removal.detail),
        }},
    )
    try:
        instruments = _current_instruments()
        start = int(removal.removed_at * 1e9)
        for call_id in removal.call_ids:
            attributes = {"app_name": key.app_name, "tool_name": tool_names.get(call_id, ""),
                          "resolution": RESOLUTION_SUPERSEDED}
            instruments.dead_calls.add(1, attributes)
            span = instruments.tracer.start_span(DEAD_CALL_SPAN, start_time=start, attributes={
                "adk_session_heal.app_name": key.app_name,
                "adk_session_heal.session_id": key.session_id,
                "adk_session_heal.call_event_id": removal.call_event_id,
                "adk_session_heal.synthetic_event_id": removal.event_id,
                "adk_session_heal.call_id": call_id,
                "adk_session_heal.tool_name": attributes["tool_name"],
                "adk_session_heal.resolution": RESOLUTION_SUPERSEDED,
            })
            span.end(end_time=max(start, time.time_ns()))
    except Exception:  # an SDK or exporter bug must not fail the session read
        logger.exception("adk_session_heal: recording telemetry for removal %s failed",
                         removal.event_id)


def report_rerun(session: Any, call_event_id: str, call_id: str, tool_name: str) -> None:
    """Logs, counts and traces one dead call run again instead of healed.

    Args:
        session: The ADK session (its app, user and id are read).
        call_event_id: The call's event.
        call_id: The call.
        tool_name: Its tool.
    """
    logger.warning(
        "adk_session_heal: re-ran dead tool call %s#%s in app=%s user=%s session=%s through"
        " ADK's tool path; its response is stored", tool_name, call_id, session.app_name,
        session.user_id, session.id,
        extra={"adk_session_heal": {
            "app_name": session.app_name, "user_id": session.user_id,
            "session_id": session.id, "call_event_id": call_event_id, "call_ids": [call_id],
            "tool_names": [tool_name], "resolution": RESOLUTION_RERUN}},
    )
    try:
        instruments = _current_instruments()
        instruments.dead_calls.add(1, {"app_name": session.app_name, "tool_name": tool_name,
                                       "resolution": RESOLUTION_RERUN})
        span = instruments.tracer.start_span(DEAD_CALL_SPAN, attributes={
            "adk_session_heal.app_name": session.app_name,
            "adk_session_heal.session_id": session.id,
            "adk_session_heal.call_event_id": call_event_id,
            "adk_session_heal.call_id": call_id,
            "adk_session_heal.tool_name": tool_name,
            "adk_session_heal.resolution": RESOLUTION_RERUN,
        })
        span.end()
    except Exception:  # an SDK or exporter bug must not fail the turn
        logger.exception("adk_session_heal: recording telemetry for re-run %s failed", call_id)


def report_repair_run(
    url: str, written_by_reason: Mapping[str, int], outcomes: Mapping[str, int]
) -> None:
    """Logs the one summary line of a repair run (WARNING when it wrote heals, else INFO).

    Args:
        url: The database, as shown to users (password masked).
        written_by_reason: Heals written, by reason (``superseded``, ``stale``).
        outcomes: Planned heals by write outcome (``written``,
            ``already_present``, ``session_changed``, ``session_deleted``).
    """
    written = sum(written_by_reason.values())

    def counts(values: Mapping[str, int]) -> str:
        return ", ".join(f"{key}={values[key]}" for key in sorted(values)) or "none"

    logger.log(
        logging.WARNING if written else logging.INFO,
        "adk_session_heal: repair of %s wrote %d synthetic event(s) (by reason: %s; "
        "by outcome: %s)",
        url, written, counts(written_by_reason), counts(outcomes),
        extra={"adk_session_heal": {"url": url, "written": written,
                                    "written_by_reason": dict(written_by_reason),
                                    "outcomes": dict(outcomes)}},
    )
