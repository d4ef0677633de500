"""Typer options shared by the run commands (``submit``, ``run``, ``resume``) and CLI helpers.

Every run-setting option defaults to ``None`` ("not given"): ``submit``/``run`` fill the gaps
from ``Settings`` (``DREADS_*``) and ``ReadSettings`` defaults, while ``resume`` compares only
the options the user actually gave against the run's recorded settings.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar, cast

import typer
from rich.console import Console

from app.engine import Endpoint, Layout, PolicyName, ReadMode, source_names, source_spec
from app.errors import DreadsError, RunSettingsMismatch
from app.runs.settings import (
    base_read_settings,
    endpoint_read_settings,
    read_overrides,
    served_fields_missing,
)
from app.store.urls import DEFAULT_DATABASE_URL
from app.store.urls import database_url as _as_url

if TYPE_CHECKING:
    from app.store.types import SessionFactory

#: How long commands wait for an upstream to be ready, unless --wait / DREADS_WAIT_S.
DEFAULT_WAIT_S = 60.0
#: How long the run commands (run, submit, resume) wait for it: not at all unless asked.
RUN_WAIT_S = 0.0

__all__ = [
    "NOT_GIVEN",
    "RUN_WAIT_S",
    "AnswerByOpt",
    "AnswerConcurrencyOpt",
    "AnswerRpsOpt",
    "AnswerUrlOpt",
    "BrokerOpt",
    "CanvasOpt",
    "CanvasStepOpt",
    "ChunkSizeOpt",
    "ConstrainedOpt",
    "DatabaseOpt",
    "DrawsOpt",
    "EndpointOpt",
    "FailOnBadLinesOpt",
    "ImageDirsOpt",
    "JobFileArg",
    "JsonOpt",
    "LayoutOpt",
    "MaxDrawsOpt",
    "ModeOpt",
    "ModelOpt",
    "PolicyOpt",
    "ReadGiven",
    "ReplaceChangedOpt",
    "ReplicatesOpt",
    "RunArg",
    "RunWaitOpt",
    "SeedOpt",
    "StepsOpt",
    "ThresholdOpt",
    "TokenizerOpt",
    "UpstreamOpt",
    "WaitOpt",
    "base_read_settings",
    "checked_url",
    "cli_errors",
    "console",
    "database_url",
    "endpoint_read_settings",
    "err_console",
    "exit_error",
    "open_store",
    "opened_store",
    "read_overrides",
    "served_fields_missing",
    "with_read_options",
]

# emoji=False: a user's text (a run name, a reason) is printed as written, never ":x:" -> ❌
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

def checked_url(ctx: typer.Context, param: typer.CallbackParam,
                value: str | None) -> str | None:
    """The callback of every option (and argument) that names a server: an address that
    cannot be one (no ``http://``, another scheme, no host) is one error line, exit 2."""
    if value is None or ctx.resilient_parsing:
        return value
    from app.errors import InputError
    from app.upstream.urls import url_problem

    name = param.opts[0] if param.opts and param.opts[0].startswith("-") else "URL"
    problem = url_problem(value, name=name)
    if problem is None:
        return value
    error = InputError(problem)
    exit_error(error, error.exit_code)


_RUN = "Run settings"
_ANSWER = "Who answers (run settings)"

ModelOpt = Annotated[
    str | None, typer.Option("--model", help="Served model name.", rich_help_panel=_RUN)
]
TokenizerOpt = Annotated[
    str | None,
    typer.Option("--tokenizer", help="Tokenizer: hub id, path or 'standin'.", rich_help_panel=_RUN),
]
CanvasOpt = Annotated[
    int | None,
    typer.Option("--canvas", min=16, help="Served canvas length.", rich_help_panel=_RUN),
]
CanvasStepOpt = Annotated[
    int | None,
    typer.Option("--canvas-step", min=1, help="Canvas width step (default 16).",
                 rich_help_panel=_RUN),
]
LayoutOpt = Annotated[
    Layout | None, typer.Option("--layout", help="Prompt layout.", rich_help_panel=_RUN)
]
ModeOpt = Annotated[
    ReadMode | None,
    typer.Option("--mode", help="isolated: one question per read (default); joint: shared.",
                 rich_help_panel=_RUN),
]
PolicyOpt = Annotated[
    PolicyName | None, typer.Option("--policy", help="Draw policy.", rich_help_panel=_RUN)
]
DrawsOpt = Annotated[
    int | None,
    typer.Option("--draws", min=1, help="N draws for the fixed policy (implies --policy fixed).",
                 rich_help_panel=_RUN),
]
ThresholdOpt = Annotated[
    float | None,
    typer.Option("--threshold", min=0.0, help="Agreement / entropy threshold (0.1).",
                 rich_help_panel=_RUN),
]
MaxDrawsOpt = Annotated[
    int | None,
    typer.Option("--max-draws", min=1, help="Most draws per question (4).", rich_help_panel=_RUN),
]
StepsOpt = Annotated[
    int | None,
    typer.Option("--steps", min=1, help="Denoise steps per read (1).", rich_help_panel=_RUN),
]
ConstrainedOpt = Annotated[
    bool | None,
    typer.Option("--constrained/--unconstrained", help="Constrained reads (server support).",
                 rich_help_panel=_RUN, show_default=False),
]
EndpointOpt = Annotated[
    Endpoint | None, typer.Option("--endpoint", help="vLLM endpoint.", rich_help_panel=_RUN)
]
SeedOpt = Annotated[
    int | None, typer.Option("--seed", help="Run seed (noise).", rich_help_panel=_RUN)
]


def checked_source(ctx: typer.Context, param: typer.CallbackParam,
                   value: str | None) -> str | None:
    """The callback of ``--answer-by``: a source this process knows, or an installed
    plugin's (``app.connect.plugins``); another name is a usage error (exit 2)."""
    if value is None or ctx.resilient_parsing:
        return value
    from app.connect.plugins import find_source

    try:
        return str(find_source(value).name)
    except DreadsError as exc:
        raise typer.BadParameter(exc.message) from None


def _sources_help() -> str:
    specs = [source_spec(name) for name in source_names()]
    reads = [spec for spec in specs if spec.plans_reads]
    endpoints = [spec for spec in specs if not spec.plans_reads]
    said = [f"{s.name} ({s.summary})" for s in reads]
    said.append(" or ".join(s.name for s in endpoints) + " (a decision endpoint at "
                "--answer-url: one request per decision, one draw per question; "
                + ", ".join(f"{s.name}: {s.path}" for s in endpoints) + ")")
    return ", ".join(said)


AnswerByOpt = Annotated[
    str | None,
    typer.Option("--answer-by", callback=checked_source,
                 metavar=f"<{' | '.join(source_names())}>",
                 help=f"Who answers the run's decisions: {_sources_help()}, or an installed "
                 "plugin's source. Its API key comes from DREADS_ANSWER_API_KEY only; "
                 "DREADS_ANSWER_TIMEOUT_S (120) and DREADS_ANSWER_GIVE_UP_S (300: how long "
                 "429/5xx are retried) tune it.",
                 rich_help_panel=_ANSWER),
]
AnswerUrlOpt = Annotated[
    str | None,
    typer.Option("--answer-url", callback=checked_url,
                 help="Base URL of the decision endpoint (vLLM, a hosted API, another dreads "
                 "serve; 'sim' for the built-in simulator). Default: the run's --upstream, so "
                 "vLLM's own reader on the same pod.",
                 rich_help_panel=_ANSWER),
]
AnswerRpsOpt = Annotated[
    float | None,
    typer.Option("--answer-rps", min=0.0, help="Budget: requests per second to the endpoint "
                 "(0: no limit, the default), per process answering the run. Not hashed: "
                 "resume may change it.", rich_help_panel=_ANSWER),
]
AnswerConcurrencyOpt = Annotated[
    int | None,
    typer.Option("--answer-concurrency", min=1, help="Budget: requests in flight to the "
                 "endpoint (16), per process answering the run. Not hashed: resume may change "
                 "it.", rich_help_panel=_ANSWER),
]
ReplicatesOpt = Annotated[
    int,
    typer.Option("--replicates", min=1, help="Copies of each decision with different noise.",
                 rich_help_panel=_RUN),
]
UpstreamOpt = Annotated[
    str | None,
    typer.Option("--upstream", callback=checked_url,
                 help="vLLM base URL, or 'sim' (default: DREADS_UPSTREAM if set, else the "
                 "run's own upstream, else http://127.0.0.1:8001)."),
]
DatabaseOpt = Annotated[
    str | None,
    typer.Option("--database-url", envvar="DREADS_DATABASE_URL", show_envvar=True,
                 metavar="URL",
                 help=f"The store: a SQLAlchemy URL, or a SQLite file path. Default "
                 f"{DEFAULT_DATABASE_URL}."),
]
WaitOpt = Annotated[
    float,
    typer.Option("--wait", min=0.0, envvar="DREADS_WAIT_S", show_envvar=True,
                 metavar="SECONDS",
                 help="How long to wait for the upstream to be ready (its model list, then a "
                 "real read)."),
]
RunWaitOpt = Annotated[
    float,
    typer.Option("--wait", min=0.0, envvar="DREADS_WAIT_S", show_envvar=True,
                 metavar="SECONDS",
                 help="Wait up to SECONDS for the model server to be ready (its model list, "
                 "then a real read), with a line saying what it waits for; 0 (the default): "
                 "a server that does not answer fails the command at once."),
]
RunArg = Annotated[str, typer.Argument(metavar="RUN", help="Run name.", show_default=False)]
JobFileArg = Annotated[Path, typer.Argument(
    metavar="FILE", show_default=False, readable=False,  # checked by app.runs.jobfile, in one line
    help="Job file: JSON lines, one decision per line (see examples/).")]
ReplaceChangedOpt = Annotated[bool, typer.Option(
    "--replace-changed",
    help="A line whose id the run holds with other content replaces the stored decision "
    "when nothing has read it yet (pending or queued); answered ones are kept and listed.")]
ImageDirsOpt = Annotated[str | None, typer.Option(
    "--image-dirs", metavar="DIR[:DIR...]",
    help="Directories a line's file:// images may be read from, separated by ':' "
    "(DREADS_IMAGE_DIRS; default: none). http(s) and data: images need none.")]
FailOnBadLinesOpt = Annotated[bool, typer.Option(
    "--fail-on-bad-lines",
    help="Exit with status 3 when a line was bad or a decision was rejected (the good lines "
    "are still stored and run), so scripts notice.")]
ChunkSizeOpt = Annotated[
    int | None, typer.Option("--chunk-size", min=1, help="Decisions per queue message.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
BrokerOpt = Annotated[str | None, typer.Option(
    "--broker", help="Celery broker URL (default DREADS_BROKER_URL).")]


#: The read-setting options, declared once: parameter name -> its Typer option. ``run``,
#: ``submit``, ``resume`` and ``serve`` take them through ``with_read_options``.
READ_OPTIONS: dict[str, Any] = {
    "model": ModelOpt, "tokenizer": TokenizerOpt, "canvas": CanvasOpt,
    "canvas_step": CanvasStepOpt, "layout": LayoutOpt, "mode": ModeOpt, "policy": PolicyOpt,
    "draws": DrawsOpt, "threshold": ThresholdOpt, "max_draws": MaxDrawsOpt, "steps": StepsOpt,
    "constrained": ConstrainedOpt, "endpoint": EndpointOpt, "seed": SeedOpt,
}
#: Who answers a run (``run``, ``submit``, ``resume``; not ``serve``).
ANSWER_OPTIONS: dict[str, Any] = {
    "answer_by": AnswerByOpt, "answer_url": AnswerUrlOpt, "answer_rps": AnswerRpsOpt,
    "answer_concurrency": AnswerConcurrencyOpt,
}
Command = TypeVar("Command", bound=Callable[..., Any])
#: What a command decorated with ``with_read_options`` receives: ``read_overrides(...)`` of the
#: options the user passed (``ReadSettings`` field names).
ReadGiven = Mapping[str, Any]
#: The default of a command's ``given`` parameter (always replaced by the decorator).
NOT_GIVEN: ReadGiven = MappingProxyType({})


def with_read_options(*, answers: bool) -> Callable[[Command], Command]:
    """Give a command the read-setting options (and, with ``answers``, who answers): the
    command declares ``given: ReadGiven = NOT_GIVEN`` and receives ``read_overrides(...)`` of
    what the user passed there; Typer sees the options, placed where ``given`` stands."""
    options = {**READ_OPTIONS, **(ANSWER_OPTIONS if answers else {})}

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        params: list[inspect.Parameter] = []
        for param in signature.parameters.values():
            if param.name != "given":
                params.append(param)
                continue
            params.extend(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                            annotation=option, default=None)
                          for name, option in options.items())

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = read_overrides(**{name: kwargs.pop(name, None) for name in options})
            return command(*args, given=given, **kwargs)

        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params])
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return cast(Command, wrapper)

    return decorate


def database_url(given: str | None) -> str:
    """The store's URL: ``--database-url`` (typer reads ``DREADS_DATABASE_URL`` into it), a
    SQLite file path made a URL, or the default ``./dreads.db``."""
    return _as_url(given or os.environ.get("DREADS_DATABASE_URL") or None)


def open_store(url: str) -> SessionFactory:
    """``app.store.migrate.open_store`` (SQLAlchemy and the schema check load only here)."""
    from app.store.migrate import open_store as _open

    return _open(url)


@contextmanager
def opened_store(url: str) -> Iterator[SessionFactory]:
    """``open_store`` whose engine (and its pooled connections) is disposed on exit."""
    from app.store.db import disposing

    with disposing(open_store(url)) as factory:
        yield factory


@contextmanager
def cli_errors() -> Iterator[None]:
    """Map dreads errors to a red message and their exit code (``DreadsError.exit_code``)."""
    try:
        yield
    except RunSettingsMismatch as exc:
        from app.runs.setting_names import cli_words

        exc.message = cli_words(exc)
        exit_error(exc, exc.exit_code)
    except DreadsError as exc:
        exit_error(exc, exc.exit_code)


def exit_error(exc: DreadsError, code: int, *, where: str = "") -> NoReturn:
    """Print ``exc`` as a red error line (``where`` before the message) and exit ``code``."""
    from rich.markup import escape

    err_console.print(f"[red]error:[/red] {escape(where + exc.message)}", highlight=False,
                      soft_wrap=True)
    raise typer.Exit(code) from exc
