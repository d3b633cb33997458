"""The commands' options: click decorators, their callbacks, and the one duration grammar.

Every flag that takes a duration reads it with :func:`parse_duration`: a bare
number is seconds, and ``s``, ``m``, ``h``, ``d`` and ``w`` may follow each
number (``90``, ``90s``, ``1h30m``, ``7d``). ``--older-than`` and
``--clock-skew`` take nothing else, ``--timeout`` also takes what a float
takes (``1e3``), and ``--since`` also takes an ISO 8601 time.

The options that choose sessions and ages are kept as typed, so a hint naming
the next command repeats them (:func:`_selection_in_hint`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from ..core.durations import format_duration, parse_duration
from ..ops.json_version import JSON_FORMAT
from ..policy import DEFAULT_CLOCK_SKEW, DEFAULT_OLDER_THAN
from .exits import _DEBUG, CliError

if TYPE_CHECKING:
    from ..core.shards import Shard
    from ..policy import HealPolicy

F = TypeVar("F", bound=Callable[..., Any])

URL_ENV = "ADK_SESSION_HEAL_URL"
"""The environment variable read when a command's URL argument is omitted."""
FORMATS = ("table", "tsv", "json", "jsonl")
"""What ``--format`` takes."""

_TYPED = "adk_session_heal.typed"
"""``ctx.meta`` key: options' text as typed, by parameter name (see :func:`_as_typed`)."""


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--debug``: remember it for :meth:`_Cli.invoke`; log DEBUG records to stderr."""
    if not value or ctx.meta.get(_DEBUG):
        return
    ctx.meta[_DEBUG] = True
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    heal_logger = logging.getLogger("adk_session_heal")
    level = heal_logger.level
    heal_logger.addHandler(handler)
    heal_logger.setLevel(logging.DEBUG)

    def restore() -> None:
        heal_logger.removeHandler(handler)
        heal_logger.setLevel(level)

    ctx.call_on_close(restore)


def _debug_option(command: F) -> F:
    return click.option(
        "--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
        help="On an error, print the traceback too (it may quote stored data); log the "
        "package's DEBUG records to stderr.",
    )(command)


def _as_typed(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Keeps an option's text as typed, for a hint that repeats it (:func:`_selection_in_hint`)."""
    if param.name is not None and value is not None:
        ctx.meta.setdefault(_TYPED, {})[param.name] = value


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    _as_typed(ctx, param, value)
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


class _Seconds(click.FloatRange):
    """``--timeout``: more than 0 seconds, as a duration (:func:`parse_duration`) or a float.

    What is neither is refused as a float range refuses it, with its message.
    """

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        """Reads a duration into seconds, then checks the range as a float range does."""
        if isinstance(value, str):
            with contextlib.suppress(ValueError):  # then a float's spelling (1e3), or its error
                value = parse_duration(value)
        return super().convert(value, param, ctx)


def _url_argument(command: F) -> F:
    """The URL argument every command takes: typed, or else ``ADK_SESSION_HEAL_URL``.

    Also adds ``--debug``, so it works after the command name too.
    """

    @functools.wraps(command)
    def with_url(*args: Any, url: str | None, **kwargs: Any) -> Any:
        if not url:
            raise CliError(f"no session database given: pass URL (e.g. "
                           f"sqlite:///.adk/session.db) or set {URL_ENV}")
        return command(*args, url=url, **kwargs)

    with_url.__doc__ = (f"{inspect.cleandoc(command.__doc__ or '')}\n\n"
                        f"URL omitted: {URL_ENV} is used.")
    return _debug_option(cast(F, click.argument("url", required=False, envvar=URL_ENV)(
        with_url)))


def _url_in_hint(url: str) -> str:
    """Returns ``" URL"`` (redacted) for a command hint, or ``""`` if it came from the env."""
    from ..store.urls import redact_url
    source = click.get_current_context().get_parameter_source("url")
    return "" if source is click.core.ParameterSource.ENVIRONMENT else f" {redact_url(url)}"


def _selection_in_hint() -> str:
    """Returns the options choosing sessions and ages given on the command line, as typed.

    For a hint naming the next command (``scan`` -> ``repair``), so it works on
    the same sessions with the same ages: ``--app``, ``--user``, ``--session``,
    ``--shard``, ``--since``, ``--older-than``, ``--clock-skew``, ``--timeout``.
    ``--incremental`` is left out: the scan has moved the scope's watermark, so
    a repair with it would read only what changed after the scan.
    """
    ctx = click.get_current_context()
    typed = ctx.meta.get(_TYPED, {})
    words: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name not in _SELECTION or ctx.get_parameter_source(name) is not (
                click.core.ParameterSource.COMMANDLINE):
            continue
        words += [param.opts[0], shlex.quote(str(typed.get(name, ctx.params[name])))]
    return "".join(f" {word}" for word in words)


_SELECTION = frozenset({"app_name", "user_id", "session_id", "shard", "since", "older_than",
                        "clock_skew", "timeout"})
"""The options :func:`_selection_in_hint` repeats."""


def _filters(command: F) -> F:
    for option in reversed((
        click.option("--app", "app_name", help="Only this app's sessions."),
        click.option("--user", "user_id", help="Only this user's sessions."),
        click.option("--session", "session_id", help="Only this session."),
    )):
        command = option(command)
    return command


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> Shard | None:
    from ..core.shards import Shard
    _as_typed(ctx, param, value)
    try:
        return None if value is None else Shard.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _since(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """``--since``: a duration before now (:func:`parse_duration`) or an ISO 8601 time."""
    from ..store.incremental import parse_since
    _as_typed(ctx, param, value)
    if value is None:
        return None
    try:
        return parse_since(value, time.time())
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def _fleet(command: F) -> F:
    """``--shard``, ``--full-scan``, ``--prefilter``, ``--incremental``, ``--since``."""
    for option in reversed((
        click.option(
            "--shard", callback=_shard, metavar="I/N",
            help="Only the I-th of N parts of the sessions (by a stable hash of the session "
            "key; I counts from 1): run N jobs side by side, --shard 1/N ... --shard N/N.",
        ),
        # The default needs a flag of its own: click 8.1 reads a string default on either
        # flag below as that flag's value (so no flag would mean --full-scan).
        click.option("--auto-prefilter", "prefilter", flag_value="auto", default=True,
                     hidden=True),
        click.option(
            "--prefilter", "prefilter", flag_value="always",
            help="Use the SQL prefilter on SQLite and MySQL/MariaDB too (measured slower there).",
        ),
        click.option(
            "--full-scan", "prefilter", flag_value="never",
            help="Classify every session in Python instead of letting the database pick the "
            "ones that can hold a finding first (the SQL prefilter, used by default on "
            "PostgreSQL; it hands any row it cannot read to Python).",
        ),
        click.option(
            "--incremental", is_flag=True,
            help="Only sessions updated since this app/user/shard's last --incremental run, "
            "and those it left unsettled (a first run reads all); saves the new state in the "
            "ledger (revision 0005: db upgrade).",
        ),
        click.option(
            "--since", callback=_since, metavar="WHEN",
            help="Only sessions updated since WHEN (a duration such as 2h or 3d, or an ISO "
            "8601 time), as stored in sessions.update_time, less --clock-skew.",
        ),
    )):
        command = option(command)
    return command


def _older_than(command: F) -> F:
    command = click.option(
        "--clock-skew",
        default=format_duration(DEFAULT_CLOCK_SKEW),
        show_default=True,
        callback=_duration,
        help="Clock difference tolerated between the hosts that wrote the sessions and this "
        "one; added to --older-than. 0s only when they share this host's clock.",
    )(command)
    return click.option(
        "--older-than",
        default=format_duration(DEFAULT_OLDER_THAN),
        show_default=True,
        callback=_duration,
        help="Calls of a session's newest invocation count as dead (stale) once older than "
        "this plus --clock-skew (by their stored time); younger ones are listed as in "
        "flight. Calls superseded by a later invocation are dead at any age.",
    )(command)


def load_hooks(reference: str) -> HealPolicy:
    """Imports ``--reconcile MODULE:NAME``: a ``HealPolicy``, or reconcile hooks by tool name.

    The current folder is searched first, as ``python -m`` would. Only the
    hooks (``reconcile``) and their ``reconcile_timeout`` are taken from a
    policy; what counts as dead comes from the command's own flags.

    Raises:
        CliError: No ``:``, a module that cannot be imported (or raises), no
            such name, or a value that is neither a policy nor a mapping of
            tool names to hooks.
    """
    import importlib

    from ..policy import HealPolicy
    module_name, _, name = reference.partition(":")
    if not module_name or not name:
        raise CliError(f"--reconcile {reference}: give MODULE:NAME (e.g. shop.hooks:POLICY)")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise CliError(f"--reconcile {reference}: no module named {exc.name!r} (run from the "
                       "folder that holds it, or set PYTHONPATH)") from exc
    except Exception as exc:  # the user's module raised while it was imported
        context = click.get_current_context(silent=True)
        if context is not None and context.meta.get(_DEBUG):
            traceback.print_exc(file=sys.stderr)
        # Its type only, as for any unexpected error: its text could quote a password.
        raise CliError(f"--reconcile {reference}: importing {module_name} raised "
                       f"{type(exc).__name__} (rerun with --debug to see it)") from exc
    value = getattr(module, name, None)
    if isinstance(value, HealPolicy):
        return HealPolicy(reconcile=value.reconcile, reconcile_timeout=value.reconcile_timeout)
    if isinstance(value, Mapping) and value and all(
            isinstance(k, str) and callable(v) for k, v in value.items()):
        return HealPolicy(reconcile=value)
    found = "nothing" if value is None else f"a {type(value).__name__}"
    raise CliError(f"--reconcile {reference}: found {found}; expected a HealPolicy or a "
                   "non-empty mapping of tool names to async hooks")


def _hooks(ctx: click.Context, param: click.Parameter, value: str | None) -> HealPolicy | None:
    """``--reconcile``: the hooks, and their failures shown on stderr (one line each)."""
    _as_typed(ctx, param, value)
    if value is None:
        return None
    hooks = load_hooks(value)
    reconcile_logger = logging.getLogger("adk_session_heal.reconcile")
    if not ctx.meta.get(_DEBUG):  # --debug shows them already
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("Warning: %(message)s"))
        reconcile_logger.addHandler(handler)
        ctx.call_on_close(lambda: reconcile_logger.removeHandler(handler))
    return hooks


def _reconcile(command: F) -> F:
    """``--reconcile MODULE:NAME``: the command receives ``hooks`` (a policy, or ``None``)."""
    return click.option(
        "--reconcile", "hooks", callback=_hooks, metavar="MODULE:NAME",
        help="Ask these reconcile hooks what happened to each call in doubt before it is "
        "healed or listed: a HealPolicy or a {tool name: async hook} mapping named NAME in "
        "MODULE (the current folder is searched first).",
    )(command)


def _scan_options(command: F) -> F:
    """Adds what a run reads and how it judges it, and hands them on as one ``options`` value.

    Declares ``--app``/``--user``/``--session`` (:func:`_filters`), the fleet
    options (:func:`_fleet`), ``--older-than``/``--clock-skew``
    (:func:`_older_than`) and ``--reconcile`` (:func:`_reconcile`); with the
    command's ``--timeout`` (:func:`_timeout`)
    they reach it as one :class:`~adk_session_heal.ops.scan.ScanOptions`,
    whose refusals (``--since`` with ``--incremental``, ``--incremental`` for
    one session) are one line.
    """

    @functools.wraps(command)
    def gathered(*args: Any, app_name: str | None, user_id: str | None,
                 session_id: str | None, shard: Shard | None, prefilter: Any,
                 incremental: bool, since: float | None, older_than: float, clock_skew: float,
                 hooks: HealPolicy | None, timeout: float | None, **kwargs: Any) -> Any:
        from ..ops.scan import ScanOptions
        from ..policy import HealPolicy
        from ..store import SessionFilter
        policy = HealPolicy(stale_after=older_than, clock_skew=clock_skew)
        if hooks is not None:
            policy = replace(policy, reconcile=hooks.reconcile,
                             reconcile_timeout=hooks.reconcile_timeout)
        try:
            options = ScanOptions(where=SessionFilter(app_name, user_id, session_id, shard),
                                  policy=policy, prefilter=prefilter, since=since,
                                  incremental=incremental, timeout=timeout)
        except ValueError as exc:
            raise CliError(str(exc)) from exc
        return command(*args, options=options, **kwargs)

    return _filters(_fleet(_older_than(_reconcile(cast(F, gathered)))))


def _timeout(command: F) -> F:
    return click.option(
        "--timeout", type=_Seconds(min=0, min_open=True), metavar="SECONDS",
        help="How long to wait for a database server, to connect and for each statement "
        "[default: 10 to connect, 60 per statement].",
    )(command)


def _json_flag(command: F) -> F:
    """``--json`` alone (the ``db`` commands print a line or a script, or one document)."""
    return click.option(
        "--json", "as_json", is_flag=True,
        help=f"Print one JSON document (\"version\": {JSON_FORMAT}).",
    )(command)


def _output_format(command: F) -> F:
    """``--format`` and ``--json``: the command receives ``output``, one of :data:`FORMATS`."""

    @functools.wraps(command)
    def with_format(*args: Any, output: str | None, as_json: bool, **kwargs: Any) -> Any:
        if as_json and output not in (None, "json"):
            raise click.UsageError(f"--json is --format json: it cannot go with --format {output}")
        if as_json:
            output = "json"
        elif output is None:
            output = "table" if sys.stdout.isatty() else "tsv"
        return command(*args, output=output, **kwargs)

    with_format = click.option(
        "--json", "as_json", is_flag=True,
        help=f"Short for --format json (a document with \"version\": {JSON_FORMAT}).",
    )(with_format)
    return cast(F, click.option(
        "--format", "output", type=click.Choice(FORMATS),
        help="table: rich tables; tsv: header + one record per line; json: one document; "
        "jsonl: one record per line + a summary line [default: table on a terminal, "
        "tsv otherwise].",
    )(with_format))
