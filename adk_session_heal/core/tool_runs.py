"""Tool runs: what the opt-in tool-run ledger knows of each tool call, and what it means.

With :class:`~adk_session_heal.runtime.tool_run_plugin.ToolRunLedgerPlugin` on a
``Runner``, every tool call leaves a :class:`ToolRun` record in the session
store (:mod:`adk_session_heal.store.ledger.tool_run_sql`):

* ``announced`` is written when the model's call event reaches the runner,
  before the runner stores it, for each of its calls: the runner, alive, is
  about to run the tools. It carries a *lease* (below), without a heartbeat.
* ``started`` is written, and committed, before the tool runs. It carries a
  *lease*: the host and process running the tool and ``lease_until``, which
  that process pushes forward (a heartbeat) while the tool runs. A process
  that dies stops renewing it, so the lease expires.
* ``finished`` is written when the tool returns, with its result
  (:func:`stored_result`: secrets redacted, size capped); ``failed`` when it
  raises (the exception's type only).

What a record says of a call whose response never reached the session is
:func:`run_outcome`: no record, nothing is known (the ledger was not there
when the call was made: ``unknown``); a live lease, it is still running or
about to run on some host (not dead, whatever its age); ``announced`` with an
expired lease, the tool never started (``not_started``); ``started`` with an
expired lease and no finish, or ``failed``, it may have done its work
(``may_have_run``); a finish, its result was lost on the way to the session
(``finished_result_lost``). Only an ``announced`` record proves a tool never
started: no record at all may be a call made before the ledger was installed.

Pure: no I/O. The record is keyed like the session it belongs to, plus the
function-call id.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..policy import CallOutcome, ToolEffect
from .session_key import SessionKey

DEFAULT_LEASE_SECONDS = 30.0
"""How long a started run's lease lasts without a heartbeat (renewed every third of it)."""

DEFAULT_MAX_RESULT_BYTES = 16_384
"""The largest tool result kept whole, in bytes of its JSON (fits MySQL's ``TEXT``)."""

_SECRET_KEY = re.compile(
    r"pass(word|wd)?|secret|token|api[_-]?key|auth(orization)?|credential|cookie|"
    r"private[_-]?key|session[_-]?key|signature",
    re.IGNORECASE,
)
"""Keys whose values are never stored: the same rule for results and arguments."""


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One tool call's record in the tool-run ledger.

    Attributes:
        app_name: The session's app.
        user_id: The session's user.
        session_id: The session.
        call_id: The function-call id the model gave.
        tool_name: The tool's name.
        invocation_id: The invocation that ran it.
        state: Where the run stands.
        host: The host that ran it (last started it).
        pid: That process.
        attempt: How many times a run of this call id was started (0: announced only).
        started_at: When the last start was recorded (the runner's clock).
        lease_until: Until when the run counts as alive without a heartbeat.
        finished_at: When it finished or failed, else ``None``.
        result: The stored result (see :func:`stored_result`), else ``None``.
        result_truncated: The result was too large and is not kept whole.
    """

    app_name: str
    user_id: str
    session_id: str
    call_id: str
    tool_name: str
    invocation_id: str
    state: RunState
    host: str
    pid: int
    attempt: int
    started_at: float
    lease_until: float
    finished_at: float | None = None
    result: Mapping[str, Any] | None = None
    result_truncated: bool = False

    def lease_alive(self, now: float, clock_skew: float = 0.0) -> bool:
        """Whether an announced or started run holds its lease at ``now`` (another host's clock).

        A lease is stamped with the running host's clock; a reader whose clock
        runs up to ``clock_skew`` seconds ahead still counts it alive.
        """
        return (self.state in (RunState.ANNOUNCED, RunState.STARTED)
                and now < self.lease_until + clock_skew)


class RunState(str, enum.Enum):
    """Where a tool run stands in the ledger."""

    ANNOUNCED = "announced"
    """The model asked for the call and the runner was about to run it; it had not started."""
    STARTED = "started"
    """The tool was about to run (and may still be running: see the lease)."""
    FINISHED = "finished"
    """The tool returned; its result is kept."""
    FAILED = "failed"
    """The tool raised; it may have done part of its work."""


class ToolRunReader(Protocol):
    """Where healers read tool runs: ``SqlToolRunLedger`` or ``RedisToolRunLedger``."""

    async def runs(self, key: SessionKey, call_ids: Iterable[str] | None = None
                   ) -> dict[str, ToolRun]:
        """Returns the session's tool runs by call id (only ``call_ids`` when given)."""
        ...


def redacted(value: Any) -> Any:
    """Returns ``value`` with the value of every secret-looking key replaced by ``"***"``.

    Dicts are walked at every depth (lists too); keys matching the secret rule
    (password, secret, token, api key, authorization, credential, cookie,
    private key, session key, signature) keep their key and lose their value.
    Everything else is returned as it is.
    """
    if isinstance(value, Mapping):
        return {str(key): "***" if _SECRET_KEY.search(str(key)) else redacted(item)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted(item) for item in value]
    return value


def as_response(value: Any) -> dict[str, Any]:
    """Returns a tool's result as the function response ADK sends for it (a new dict).

    ADK wraps a result that is not a dict (an ``AgentTool``'s text, a number)
    as ``{"result": value}`` before the model sees it; a dict is sent as it is.
    The one statement of that rule here: the tool-run plugin records results
    so, the ledgers read kept ones back so, and an operator's ``--result`` is
    stored so.
    """
    return dict(value) if isinstance(value, Mapping) else {"result": value}


def kept_result(text: str | None) -> dict[str, Any] | None:
    """Reads back a result the ledger kept (see :func:`stored_result`), as a response.

    Returns:
        The response (:func:`as_response`), or ``None`` when nothing was kept
        or the text is not JSON (a damaged record is never sent as a result).
    """
    if text is None:
        return None
    try:
        return as_response(json.loads(text))
    except (ValueError, RecursionError):
        return None


def stored_result(result: Any, max_bytes: int = DEFAULT_MAX_RESULT_BYTES
                  ) -> tuple[str | None, bool]:
    """Returns the JSON the ledger keeps for a tool's result, and whether it was cut.

    The result is redacted (:func:`redacted`) and serialized (values JSON
    cannot hold are written as their ``str``). A result whose JSON is longer
    than ``max_bytes`` (UTF-8) is not kept (``None``, ``True``): a partial
    result would be a false one.

    Args:
        result: What the tool returned (ADK passes a dict).
        max_bytes: The largest JSON kept.
    """
    text = json.dumps(redacted(result), default=str, ensure_ascii=False, sort_keys=True)
    if len(text.encode("utf-8")) > max_bytes:
        return None, True
    return text, False


def run_outcome(run: ToolRun | None, now: float, clock_skew: float = 0.0) -> CallOutcome | None:
    """What the ledger says of an unanswered call, or ``None`` if it is still running.

    Args:
        run: The call's record, or ``None`` when the ledger holds none.
        now: The reader's time (seconds since the epoch).
        clock_skew: How far the reader's clock may run ahead of the runner's.

    Returns:
        ``UNKNOWN`` (no record), ``None`` (announced or started, lease alive:
        never heal it, however old), ``NOT_STARTED`` (announced, lease
        expired), ``MAY_HAVE_RUN`` (started and the lease expired, or failed
        part way), or ``FINISHED_RESULT_LOST`` (finished: its result is in
        the record unless it was too large).
    """
    if run is None:
        return CallOutcome.UNKNOWN
    if run.state is RunState.FINISHED:
        return CallOutcome.FINISHED_RESULT_LOST
    if run.lease_alive(now, clock_skew):
        return None
    if run.state is RunState.ANNOUNCED:
        return CallOutcome.NOT_STARTED
    return CallOutcome.MAY_HAVE_RUN


class ReplayAction(str, enum.Enum):
    """What a run of a call that may have run before does (see :func:`replay_action`)."""

    RUN = "run"
    """Run the tool: it never started, or running it again is harmless."""
    ANSWER = "answer"
    """Do not run it: answer with the recorded result, or say it may have run."""
    WAIT = "wait"
    """Another run of the call holds a live lease: wait for it, never run it alongside."""


def replay_action(run: ToolRun | None, effect: ToolEffect, now: float,
                  clock_skew: float = 0.0) -> tuple[ReplayAction, CallOutcome | None]:
    """What to do when a call is about to run and the ledger may know an earlier run of it.

    The same reading of a record as :func:`run_outcome`, for a call ADK (a
    resumable app's resume) or ``RerunSafeCallsPlugin`` is about to run again,
    matched by call id:

    * no record, or ``announced`` with an expired lease: the tool never
      started (or nothing is known): run it;
    * a live lease, announced or started: another runner has it: wait;
    * ``finished``: answer with the recorded result (``FINISHED_RESULT_LOST``),
      unless the result was too large to keep and running again is harmless;
    * ``started`` with an expired lease, or ``failed``: it may have done its
      work: run it again only for a ``read_only`` or ``idempotent`` tool, else
      answer that it may have run (``MAY_HAVE_RUN``).

    Args:
        run: The call's record, or ``None``.
        effect: The tool's declared effect.
        now: The reader's time.
        clock_skew: How far the reader's clock may run ahead of the record's host.

    Returns:
        The action, and the outcome an ``ANSWER`` reports (else ``None``).
    """
    if run is None:
        return ReplayAction.RUN, None
    outcome = run_outcome(run, now, clock_skew)
    if outcome is None:
        return ReplayAction.WAIT, None
    if outcome is CallOutcome.NOT_STARTED:
        return ReplayAction.RUN, None
    if outcome is CallOutcome.FINISHED_RESULT_LOST and (run.result is not None
                                                        or not effect.safe_to_retry):
        return ReplayAction.ANSWER, outcome
    if effect.safe_to_retry:
        return ReplayAction.RUN, None
    return ReplayAction.ANSWER, outcome
