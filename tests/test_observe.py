"""Operator-facing reports of heals: the log record, OpenTelemetry metrics and spans.

Telemetry is checked with the real OpenTelemetry SDK (in-memory metric reader
and span exporter), and end to end through HealingSessionService over ADK's
in-memory session service.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.metrics import Meter, NoOpCounter, NoOpMeter, NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adk_session_heal import ScanOptions
from adk_session_heal.core.heal_record import HealRecord, HealTrigger
from adk_session_heal.observe import (
    DEAD_CALL_SPAN,
    DEAD_CALLS_METRIC,
    HEAL_SPAN,
    HEALED_CALLS_METRIC,
    HEALS_METRIC,
    report_heal,
    set_telemetry_providers,
)


def heal_record(**overrides: Any) -> HealRecord:
    fields: dict[str, Any] = {
        "app_name": "weather_app",
        "user_id": "u-42",
        "session_id": "s-1",
        "call_event_id": "e-0002",
        "synthetic_event_id": "e-0002-heal",
        "invocation_id": "inv-1",
        "call_ids": ("call-1", "call-2"),
        "tool_names": ("get_weather", "get_time"),
        "reason": "superseded",
        "trigger": HealTrigger.APPEND,
        "healed_at": time.time(),
    }
    fields.update(overrides)
    return HealRecord(**fields)


def _report(record: HealRecord, on_heal: Callable[[HealRecord], object] | None = None) -> None:
    """Reports ``record`` as a writer does, with its encoding."""
    report_heal(record, on_heal, data=record.to_json())


class Telemetry:
    """An SDK meter and tracer provider whose output the test can read."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.spans = InMemorySpanExporter()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))

    def points(self, metric_name: str) -> list[tuple[dict[str, Any], int]]:
        """Returns (attributes, value) of every data point of one metric."""
        data = self.reader.get_metrics_data()
        found: list[tuple[dict[str, Any], int]] = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == metric_name:
                        found += [(dict(p.attributes or {}), int(p.value))
                                  for p in metric.data.data_points]
        return sorted(found, key=lambda point: sorted(point[0].items()))

    def heal_spans(self) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name == HEAL_SPAN]

    def dead_call_spans(self) -> list[ReadableSpan]:
        """The per-call spans, in call-id order."""
        spans = [s for s in self.spans.get_finished_spans() if s.name == DEAD_CALL_SPAN]
        return sorted(spans, key=lambda s: str((s.attributes or {})["adk_session_heal.call_id"]))


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    sdk = Telemetry()
    set_telemetry_providers(sdk.meter_provider, sdk.tracer_provider)
    yield sdk
    set_telemetry_providers()
    sdk.meter_provider.shutdown()
    sdk.tracer_provider.shutdown()


def test_one_heal_logs_one_warning_with_structured_fields(
    caplog: pytest.LogCaptureFixture, telemetry: Telemetry
) -> None:
    """A heal is one WARNING record whose extra fields carry the whole record."""
    record = heal_record()
    with caplog.at_level(logging.WARNING, logger="adk_session_heal"):
        report_heal(record, data=record.to_json())
    [logged] = caplog.records
    assert logged.levelno == logging.WARNING
    assert "get_weather#call-1, get_time#call-2 (superseded)" in logged.getMessage()
    data = record.to_json()
    assert logged.adk_session_heal == {  # type: ignore[attr-defined]
        **{key: data[key] for key in ("app_name", "user_id", "session_id", "call_event_id",
                                      "synthetic_event_id", "invocation_id", "call_ids",
                                      "tool_names", "reason", "trigger")},
        "effects": list(record.call_effects), "outcomes": list(record.call_outcomes)}


def test_heals_counter_counts_heals_with_low_cardinality_attributes(
    telemetry: Telemetry,
) -> None:
    """adk_session_heal.heals counts heals by app, reason and trigger; never by id."""
    _report(heal_record())
    _report(heal_record(synthetic_event_id="x-heal", trigger=HealTrigger.GET_SESSION))
    _report(heal_record(synthetic_event_id="y-heal", session_id="s-2"))
    assert telemetry.points(HEALS_METRIC) == [
        ({"app_name": "weather_app", "reason": "superseded", "trigger": "append"}, 2),
        ({"app_name": "weather_app", "reason": "superseded", "trigger": "get_session"}, 1),
    ]


def test_healed_calls_counter_counts_each_call_by_tool(telemetry: Telemetry) -> None:
    """adk_session_heal.healed_calls adds one per dead call, split by tool name."""
    _report(heal_record())
    base = {"app_name": "weather_app", "reason": "superseded", "trigger": "append"}
    assert telemetry.points(HEALED_CALLS_METRIC) == [
        ({**base, "tool_name": "get_time"}, 1),
        ({**base, "tool_name": "get_weather"}, 1),
    ]


def test_each_heal_records_a_span_with_the_ids(telemetry: Telemetry) -> None:
    """Each heal is one finished span carrying session, event and call ids."""
    record = heal_record()
    report_heal(record, data=record.to_json())
    [span] = telemetry.heal_spans()
    attributes = dict(span.attributes or {})
    assert attributes["adk_session_heal.session_id"] == "s-1"
    assert attributes["adk_session_heal.synthetic_event_id"] == "e-0002-heal"
    assert tuple(attributes["adk_session_heal.call_ids"]) == ("call-1", "call-2")  # type: ignore[arg-type]
    assert attributes["adk_session_heal.trigger"] == "append"
    assert span.start_time is not None and span.end_time is not None
    assert span.start_time == int(record.healed_at * 1e9) <= span.end_time


def test_the_heal_span_is_a_child_of_the_current_span(telemetry: Telemetry) -> None:
    """Inside ADK's invocation span the heal span joins the same trace."""
    tracer = telemetry.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("invocation") as parent:
        _report(heal_record())
    [span] = telemetry.heal_spans()
    assert span.parent is not None
    assert span.parent.span_id == parent.get_span_context().span_id
    assert span.context is not None
    assert span.context.trace_id == parent.get_span_context().trace_id


def test_each_dead_call_is_one_span_and_one_dead_calls_increment(telemetry: Telemetry) -> None:
    """A heal of two calls: two dead_call spans under the heal span, dead_calls +1 per call."""
    _report(heal_record(effects=("read_only", "side_effect"),
                            outcomes=("unknown", "unknown")))
    base = {"app_name": "weather_app", "reason": "superseded", "trigger": "append",
            "outcome": "unknown", "resolution": "healed"}
    assert telemetry.points(DEAD_CALLS_METRIC) == [
        ({**base, "tool_name": "get_weather", "tool_effect": "read_only"}, 1),
        ({**base, "tool_name": "get_time", "tool_effect": "side_effect"}, 1),
    ]
    [heal] = telemetry.heal_spans()
    first, second = telemetry.dead_call_spans()
    for span, call_id, tool, effect in ((first, "call-1", "get_weather", "read_only"),
                                        (second, "call-2", "get_time", "side_effect")):
        attributes = dict(span.attributes or {})
        assert attributes["adk_session_heal.call_id"] == call_id
        assert attributes["adk_session_heal.tool_name"] == tool
        assert attributes["adk_session_heal.tool_effect"] == effect
        assert attributes["adk_session_heal.outcome"] == "unknown"
        assert attributes["adk_session_heal.resolution"] == "healed"
        assert attributes["adk_session_heal.synthetic_event_id"] == "e-0002-heal"
        assert span.parent is not None and heal.context is not None
        assert span.parent.span_id == heal.context.span_id


def test_a_record_without_effects_reports_them_as_unknown(telemetry: Telemetry) -> None:
    """A record that carries no effects (a ledger row) counts its calls as tool_effect=unknown."""
    _report(heal_record())
    assert {point[0]["tool_effect"] for point in telemetry.points(DEAD_CALLS_METRIC)} == {
        "unknown"}
    assert [dict(s.attributes or {})["adk_session_heal.tool_effect"]
            for s in telemetry.dead_call_spans()] == ["unknown", "unknown"]


class BrokenCounter(NoOpCounter):
    def add(self, amount: int | float, attributes: Any = None, context: Any = None) -> None:
        raise RuntimeError("metrics backend down")


class BrokenMeterProvider(NoOpMeterProvider):
    """A meter provider whose counters raise on every add."""

    def get_meter(self, name: str, *args: Any, **kwargs: Any) -> Meter:
        meter = NoOpMeter(name)
        meter.create_counter = lambda name, *a, **k: BrokenCounter(name)  # type: ignore[method-assign]
        return meter


def test_broken_telemetry_never_fails_the_report_and_on_heal_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Telemetry errors are logged with their traceback; the callback still gets the heal."""
    set_telemetry_providers(meter_provider=BrokenMeterProvider())
    seen: list[HealRecord] = []
    try:
        with caplog.at_level(logging.WARNING, logger="adk_session_heal"):
            _report(heal_record(), seen.append)
    finally:
        set_telemetry_providers()
    assert len(seen) == 1
    [failure] = [r for r in caplog.records if "recording telemetry" in r.getMessage()]
    assert failure.exc_info is not None and "metrics backend down" in str(failure.exc_info[1])


async def test_a_real_heal_through_the_service_is_counted(telemetry: Telemetry) -> None:
    """HealingSessionService's append-path heal reaches the counter and the span."""
    from google.adk.sessions import InMemorySessionService

    from adk_session_heal.runtime.service import HealingSessionService
    from adk_session_heal.testing import History

    inner = InMemorySessionService()
    history = History(start=time.time() - 60)
    history.user("weather in Paris?")
    history.call("get_weather", {"city": "Paris"})
    session = await inner.create_session(app_name="weather_app", user_id="u")
    for event in history.events:
        await inner.append_event(session, event)
    service = HealingSessionService(inner)
    fresh = await service.get_session(app_name="weather_app", user_id="u", session_id=session.id)
    assert fresh is not None
    assert telemetry.points(HEALS_METRIC) == [], "an in-flight call is not healed"
    history.user("hello?")
    await service.append_event(fresh, history.events[-1])
    assert telemetry.points(HEALS_METRIC) == [
        ({"app_name": "weather_app", "reason": "superseded", "trigger": "append"}, 1)
    ]
    [span] = telemetry.heal_spans()
    assert dict(span.attributes or {})["adk_session_heal.session_id"] == session.id


TWO_EFFECTS = {"get_weather": "read_only", "charge_card": "side_effect"}


def two_dead_calls(start: float) -> Any:
    """A history whose one call event holds two calls of different effects, then a new turn."""
    from adk_session_heal.testing import History

    history = History(start=start)
    history.user("weather in Paris, and pay the booking")
    history.calls(("get_weather", {"city": "Paris"}), ("charge_card", {"amount": 12}),
                  ids=["call-w", "call-c"])
    return history


def assert_two_dead_calls(telemetry: Telemetry, trigger: str) -> None:
    """Two dead_call spans and dead_calls +2, with each call's own tool and effect."""
    base = {"app_name": "weather_app", "reason": "superseded", "trigger": trigger,
            "outcome": "unknown", "resolution": "healed"}
    assert telemetry.points(DEAD_CALLS_METRIC) == [
        ({**base, "tool_name": "get_weather", "tool_effect": "read_only"}, 1),
        ({**base, "tool_name": "charge_card", "tool_effect": "side_effect"}, 1),
    ]
    assert telemetry.points(HEALS_METRIC) == [
        ({"app_name": "weather_app", "reason": "superseded", "trigger": trigger}, 1)]
    [heal] = telemetry.heal_spans()
    spans = telemetry.dead_call_spans()
    assert [(dict(s.attributes or {})["adk_session_heal.call_id"],
             dict(s.attributes or {})["adk_session_heal.tool_name"],
             dict(s.attributes or {})["adk_session_heal.tool_effect"]) for s in spans] == [
        ("call-c", "charge_card", "side_effect"), ("call-w", "get_weather", "read_only")]
    assert heal.context is not None
    assert all(s.parent is not None and s.parent.span_id == heal.context.span_id
               for s in spans)


async def test_two_dead_calls_healed_by_the_wrapper_are_two_spans(telemetry: Telemetry) -> None:
    """Through HealingSessionService over ADK's DatabaseSessionService: one span per dead call."""
    from google.adk.sessions import DatabaseSessionService

    from adk_session_heal.policy import HealPolicy, ToolEffect
    from adk_session_heal.runtime.service import HealingSessionService
    from adk_session_heal.testing import temporary_sqlite_url

    inner = DatabaseSessionService(temporary_sqlite_url())
    try:
        history = two_dead_calls(time.time() - 60)
        session = await inner.create_session(app_name="weather_app", user_id="u")
        for event in history.events:
            await inner.append_event(session, event)
        policy = HealPolicy(tool_effects={k: ToolEffect(v) for k, v in TWO_EFFECTS.items()})
        service = HealingSessionService(inner, policy=policy)
        fresh = await service.get_session(app_name="weather_app", user_id="u",
                                          session_id=session.id)
        assert fresh is not None
        history.user("hello?")
        await service.append_event(fresh, history.events[-1])
        assert_two_dead_calls(telemetry, "append")
    finally:
        await inner.close()


async def test_two_dead_calls_healed_by_repair_are_two_spans(telemetry: Telemetry) -> None:
    """Through repair() on a SQLite database written by ADK: one span per dead call."""
    from google.adk.sessions import DatabaseSessionService

    from adk_session_heal.ops.repair import repair
    from adk_session_heal.policy import HealPolicy, ToolEffect
    from adk_session_heal.testing import temporary_sqlite_url

    url = temporary_sqlite_url()
    inner = DatabaseSessionService(url)
    try:
        history = two_dead_calls(time.time() - 600)
        history.user("hello?")
        session = await inner.create_session(app_name="weather_app", user_id="u")
        for event in history.events:
            await inner.append_event(session, event)
    finally:
        await inner.close()
    policy = HealPolicy(tool_effects={k: ToolEffect(v) for k, v in TWO_EFFECTS.items()})
    report = await repair(url, ScanOptions(policy=policy), ledger=False)
    assert report.healed == 1
    assert_two_dead_calls(telemetry, "repair")


GLOBAL_SDK_SCRIPT = textwrap.dedent(
    """
    import time
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from adk_session_heal.observe import report_heal
    from adk_session_heal.core.heal_record import HealRecord, HealTrigger

    record = HealRecord("app", "u", "s", "e", "e-heal", "inv", ("c",), ("tool",),
                        "superseded", HealTrigger.GET_SESSION, time.time())
    report_heal(record, data=record.to_json())  # before any SDK: a no-op, must not fail
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    report_heal(record, data=record.to_json())
    [point] = [p for rm in reader.get_metrics_data().resource_metrics
               for sm in rm.scope_metrics for m in sm.metrics
               if m.name == "adk_session_heal.heals" for p in m.data.data_points]
    print(point.value)
    """
)


def test_the_global_sdk_is_used_even_when_configured_after_the_first_heal() -> None:
    """Without set_telemetry_providers, heals go to the global SDK, however late it is set."""
    completed = subprocess.run(
        [sys.executable, "-c", GLOBAL_SDK_SCRIPT],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "1"


ADK_TRACE_SCRIPT = textwrap.dedent(
    """
    import asyncio
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from google.adk.sessions import DatabaseSessionService
    from adk_session_heal.testing import (
        APP_NAME, USER_ID, resume_turn, spawn_crash, temporary_sqlite_url)
    from adk_session_heal.runtime.service import HealingSessionService

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    async def main():
        url = temporary_sqlite_url()
        inner = DatabaseSessionService(url)
        session = await inner.create_session(app_name=APP_NAME, user_id=USER_ID)
        assert spawn_crash(url, session.id) == 17
        await resume_turn(HealingSessionService(inner), session.id, "hello?")
        await inner.close()

    asyncio.run(main())
    spans = {s.context.span_id: s for s in exporter.get_finished_spans()}
    [heal] = [s for s in spans.values() if s.name == "adk_session_heal.heal"]
    parent = spans[heal.parent.span_id]
    print(f"{parent.name}|{parent.instrumentation_scope.name}")
    """
)


@pytest.mark.slow
def test_in_an_adk_run_the_heal_span_nests_in_adk_s_trace() -> None:
    """With a global SDK, the heal span of a resumed run is a child of ADK's run span."""
    completed = subprocess.run(
        [sys.executable, "-c", ADK_TRACE_SCRIPT],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert completed.returncode == 0, completed.stderr
    parent_name, scope = completed.stdout.strip().splitlines()[-1].split("|")
    assert parent_name == "invoke_workflow weather_agent", completed.stdout
    assert scope != "adk_session_heal"


def test_a_recovered_result_is_resolution_recovered(telemetry: Telemetry) -> None:
    """A heal that wrote a finished run's kept result counts that call as recovered."""
    _report(heal_record(outcomes=("finished_result_lost", "may_have_run"),
                            recovered=(True, False)))
    points = telemetry.points(DEAD_CALLS_METRIC)
    assert [(p[0]["outcome"], p[0]["resolution"]) for p in points] == [
        ("finished_result_lost", "recovered"), ("may_have_run", "healed")]
    assert [dict(s.attributes or {})["adk_session_heal.resolution"]
            for s in telemetry.dead_call_spans()] == ["recovered", "healed"]


def test_a_heal_taken_back_is_resolution_superseded(telemetry: Telemetry) -> None:
    """report_removal counts each call of the heal taken back, with a dead_call span."""
    from adk_session_heal.core.session_key import SessionKey
    from adk_session_heal.observe import report_removal
    from adk_session_heal.store.base import Removal, RemovalReason

    report_removal(Removal(SessionKey("weather_app", "u", "s"), "e-0002-heal", "e-0002",
                           ("call-1",), RemovalReason.LATE_RESULT, time.time(), "wrapper",
                           ("late-1",)), {"call-1": "get_weather"})
    assert telemetry.points(DEAD_CALLS_METRIC) == [
        ({"app_name": "weather_app", "tool_name": "get_weather", "resolution": "superseded"}, 1)]
    (span,) = telemetry.dead_call_spans()
    assert (span.attributes or {})["adk_session_heal.resolution"] == "superseded"


def test_a_call_run_again_is_resolution_re_run(telemetry: Telemetry) -> None:
    """report_rerun counts the call run again, with a dead_call span."""
    from types import SimpleNamespace

    from adk_session_heal.observe import report_rerun

    report_rerun(SimpleNamespace(app_name="weather_app", user_id="u", id="s"), "e-0002",
                 "call-1", "get_weather")
    assert telemetry.points(DEAD_CALLS_METRIC) == [
        ({"app_name": "weather_app", "tool_name": "get_weather", "resolution": "re-run"}, 1)]
    (span,) = telemetry.dead_call_spans()
    assert (span.attributes or {})["adk_session_heal.call_id"] == "call-1"
