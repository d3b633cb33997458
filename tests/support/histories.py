"""Hypothesis strategies generating ADK event histories (shared by property tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from adk_session_heal.testing import History

# One op per step of a history: new user turn, model text, one or two calls
# (optionally long-running or id-less), an answer to an open call.
OPS = st.lists(
    st.one_of(
        st.just(("user",)),
        st.just(("text",)),
        st.tuples(st.just("call"), st.integers(1, 2), st.sampled_from(["plain", "long", "idless"])),
        st.tuples(st.just("answer"), st.integers(0, 5)),
        st.tuples(st.just("confirm"), st.integers(0, 5)),
    ),
    min_size=1,
    max_size=25,
)


def build(ops: list[tuple[object, ...]], *, start: float = 1_700_000_000.0) -> History:
    """Builds a history from generated ops; answers go to calls still open."""
    history = History(start=start)
    history.user("hi")
    open_calls: list[tuple[str, str]] = []
    for op in ops:
        kind = op[0]
        if kind == "user":
            history.user("next")
        elif kind == "text":
            history.text("reply")
        elif kind == "call":
            count, flavour = op[1], op[2]
            names = [f"tool{i}" for i in range(int(count))]  # type: ignore[call-overload]
            if flavour == "idless":
                history.calls(*names, ids=[None] * len(names))
                continue
            ids = history.calls(*names, long_running=flavour == "long")
            open_calls.extend((i, n) for i, n in zip(ids, names, strict=True) if i)
        elif kind in ("answer", "confirm") and open_calls:
            call_id, name = open_calls.pop(int(op[1]) % len(open_calls))  # type: ignore[call-overload]
            history.respond((call_id, name), pending=kind == "confirm")
    return history
