"""Hypothesis strategies for ugly session histories (the whole-store fuzz test).

:data:`UGLY_OPS` draws a list of ops and :func:`build_ugly` turns it into ADK
``Event`` objects. Between them they cover the shapes real stores hold after
crashes, old ADK versions and hand-written agents:

* responses in separate events (one event per answered call of a parallel
  call event) or together;
* parallel calls, parallel calls sharing one id, ids reused across
  invocations, id-less calls, calls with an empty or missing function name;
* long-running calls (``long_running_tool_ids``) and calls awaiting a tool
  confirmation (``requested_tool_confirmations``);
* equal, microsecond-close, sub-microsecond-close and backwards timestamps
  (a stepped clock), besides the usual one-second steps;
* many invocations, text-only turns and orphaned responses.

Every op is plain data (tuples of strings and ints), so a failing example
prints as a literal history that can be pasted into a regression test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types
from hypothesis import strategies as st

__all__ = ["GAPS", "UGLY_OPS", "Op", "build_ugly", "describe"]

Op = tuple[object, ...]

GAPS: dict[str, float] = {
    "tie": 0.0,
    "one_us": 1e-6,
    "sub_us": 3e-7,
    "two_us": 2e-6,
    "back": -2.5,
}
"""Clock steps a ``("gap", name)`` op puts before the next event (otherwise 1 s)."""

_CALL = st.tuples(
    st.just("call"),
    st.integers(1, 3),  # calls in the event
    st.sampled_from(["plain", "plain", "long"]),  # long: every call long-running
    st.sampled_from(["fresh", "fresh", "shared", "reuse", "idless", "mixed"]),
    st.sampled_from(["named", "named", "named", "empty", "missing"]),  # first call's name
)

UGLY_OPS = st.lists(
    st.one_of(
        st.just(("user",)),
        st.just(("text",)),
        _CALL,
        st.tuples(st.just("answer"), st.integers(0, 7), st.booleans()),  # together?
        st.tuples(st.just("confirm"), st.integers(0, 7)),
        st.just(("orphan",)),
        st.tuples(st.just("gap"), st.sampled_from(sorted(GAPS))),
    ),
    min_size=1,
    max_size=18,
)
"""Ops of one session after its first user message (see :func:`build_ugly`)."""


@dataclass
class _OpenCall:
    call_id: str
    name: str | None
    event_index: int


@dataclass
class _Builder:
    clock: float
    agent: str = "assistant"
    events: list[Event] = field(default_factory=list)
    invocation_id: str = ""
    invocations: int = 0
    calls: int = 0
    orphans: int = 0
    used_ids: list[str] = field(default_factory=list)
    open: list[_OpenCall] = field(default_factory=list)
    gap: float | None = None

    def add(self, **fields: object) -> Event:
        if self.events:
            self.clock += 1.0 if self.gap is None else self.gap
        self.gap = None
        fields.setdefault("invocation_id", self.invocation_id)
        fields.setdefault("author", self.agent)
        event = Event(id=f"e-{len(self.events) + 1:04d}", timestamp=self.clock,
                      **fields)  # type: ignore[arg-type]
        self.events.append(event)
        return event

    def user(self) -> None:
        self.invocations += 1
        self.invocation_id = f"inv-{self.invocations}"
        self.add(author="user", content=types.Content(
            role="user", parts=[types.Part(text=f"turn {self.invocations}")]))

    def fresh_id(self) -> str:
        self.calls += 1
        call_id = f"call-{self.calls}"
        self.used_ids.append(call_id)
        return call_id

    def call(self, count: int, flavour: str, id_mode: str, name_mode: str) -> None:
        ids: list[str | None]
        if id_mode == "shared":
            shared = self.fresh_id()
            ids = [shared] * count
        elif id_mode == "reuse" and self.used_ids:
            ids = [self.used_ids[0]] + [self.fresh_id() for _ in range(count - 1)]
        elif id_mode == "idless":
            ids = [None] * count
        elif id_mode == "mixed":
            ids = [None] + [self.fresh_id() for _ in range(count - 1)]
        else:
            ids = [self.fresh_id() for _ in range(count)]
        names: list[str | None] = [f"tool{i}" for i in range(count)]
        names[0] = {"named": "tool0", "empty": "", "missing": None}[name_mode]
        parts = [types.Part(function_call=types.FunctionCall(id=call_id, name=name, args={}))
                 for call_id, name in zip(ids, names, strict=True)]
        long_running = {i for i in ids if i} if flavour == "long" else None
        self.add(content=types.Content(role="model", parts=parts),
                 long_running_tool_ids=long_running or None)
        index = len(self.events) - 1
        self.open.extend(_OpenCall(i, n, index) for i, n in zip(ids, names, strict=True) if i)

    def respond(self, answers: Sequence[_OpenCall], *, pending: bool = False) -> None:
        parts = [types.Part(function_response=types.FunctionResponse(
            id=a.call_id, name=a.name, response={"result": "ok"})) for a in answers]
        actions = EventActions()
        if pending:
            actions.requested_tool_confirmations = {
                a.call_id: ToolConfirmation(hint="confirm?") for a in answers}
        self.add(content=types.Content(role="user", parts=parts), actions=actions)

    def answer(self, pick: int, together: bool) -> None:
        if not self.open:
            return
        chosen = self.open[pick % len(self.open)]
        answers = ([c for c in self.open if c.event_index == chosen.event_index]
                   if together else [chosen])
        for answered in answers:
            self.open.remove(answered)
        self.respond(answers)

    def confirm(self, pick: int) -> None:
        if self.open:
            self.respond([self.open.pop(pick % len(self.open))], pending=True)

    def orphan(self) -> None:
        self.orphans += 1
        self.respond([_OpenCall(f"ghost-{self.orphans}", "ghost", -1)])


def build_ugly(ops: Sequence[Op], *, start: float) -> list[Event]:
    """Builds one session's events: a first user message, then one event per op.

    Args:
        ops: From :data:`UGLY_OPS` (or written by hand for a regression).
        start: The first event's timestamp; each later one is 1 s on unless a
            ``("gap", name)`` op set the step before it (:data:`GAPS`).

    Returns:
        The events, ids ``e-0001``, ``e-0002``, ... in the order written.
    """
    builder = _Builder(clock=start)
    builder.user()
    for op in ops:
        kind = op[0]
        if kind == "user":
            builder.user()
        elif kind == "text":
            builder.add(content=types.Content(role="model", parts=[types.Part(text="reply")]))
        elif kind == "call":
            _, count, flavour, id_mode, name_mode = op
            builder.call(int(count), str(flavour), str(id_mode), str(name_mode))  # type: ignore[call-overload]
        elif kind == "answer":
            builder.answer(int(op[1]), bool(op[2]))  # type: ignore[call-overload]
        elif kind == "confirm":
            builder.confirm(int(op[1]))  # type: ignore[call-overload]
        elif kind == "orphan":
            builder.orphan()
        elif kind == "gap":
            builder.gap = GAPS[str(op[1])]
    return builder.events


def describe(events: Sequence[Event]) -> str:
    """Returns one line per event (id, invocation, timestamp, parts), for failure reports."""
    lines = []
    for event in events:
        parts = []
        for part in (event.content.parts or []) if event.content else []:
            if part.function_call is not None:
                parts.append(f"call({part.function_call.id},{part.function_call.name!r})")
            elif part.function_response is not None:
                response = part.function_response
                parts.append(f"resp({response.id},{response.name!r})")
            elif part.text:
                parts.append(f"text({part.text!r})")
        extra = []
        if event.long_running_tool_ids:
            extra.append(f"long_running={sorted(event.long_running_tool_ids)}")
        if event.actions.requested_tool_confirmations:
            extra.append(f"confirm={sorted(event.actions.requested_tool_confirmations)}")
        if (event.custom_metadata or {}).get("adk_session_heal"):
            extra.append("HEAL")
        lines.append(f"{event.id:<14} {event.invocation_id:<7} {event.timestamp:.7f} "
                     f"{event.author:<10} {' '.join(parts)} {' '.join(extra)}".rstrip())
    return "\n".join(lines)
