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

from app.engine import DEFAULT_UPSTREAM, source_names
from app.errors import DreadsError, RunSettingsMismatch
from app.runs.read_options import READ_OPTIONS as READ_TABLE
from app.runs.read_options import REPLICATES, ReadOption, read_overrides
from app.runs.settings import (
    base_read_settings,
    endpoint_read_settings,
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
    "BrokerOpt",
    "ChunkSizeOpt",
    "DatabaseOpt",
    "FailOnBadLinesOpt",
    "ImageDirsOpt",
    "JobFileArg",
    "JsonOpt",
    "ReadGiven",
    "ReplaceChangedOpt",
    "ReplicatesOpt",
    "RunArg",
    "RunWaitOpt",
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


ReplicatesOpt = Annotated[
    int | None,
    typer.Option(REPLICATES.flags, min=REPLICATES.minimum, help=REPLICATES.help),
]
UpstreamOpt = Annotated[
    str | None,
    typer.Option("--upstream", callback=checked_url,
                 help="vLLM base URL, or 'sim' (default: DREADS_UPSTREAM if set, else the "
                 f"run's own upstream, else {DEFAULT_UPSTREAM})."),
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


def _typer_option(option: ReadOption) -> Any:
    """The Typer option of a read setting, as the table declares it (default None)."""
    extra: dict[str, Any] = {"rich_help_panel": option.panel}
    if option.minimum is not None:
        extra["min"] = option.minimum
    if option.url:
        extra["callback"] = checked_url
    if option.source:
        extra["callback"] = checked_source
        extra["metavar"] = f"<{' | '.join(source_names())}>"
    if option.kind is bool:
        extra["show_default"] = False
    return cast(Any, Annotated)[option.kind | None,
                                typer.Option(option.flags, help=option.help, **extra)]


#: The read-setting options (``app.runs.read_options``): parameter name -> its Typer option.
#: ``run``, ``submit``, ``resume`` and ``serve`` take them through ``with_read_options``.
READ_OPTIONS: dict[str, Any] = {option.name: _typer_option(option)
                                for option in READ_TABLE if not option.answers}
#: Who answers a run (``run``, ``submit``, ``resume``; not ``serve``).
ANSWER_OPTIONS: dict[str, Any] = {option.name: _typer_option(option)
                                  for option in READ_TABLE if option.answers}
Command = TypeVar("Command", bound=Callable[..., Any])
#: What a command decorated with ``with_read_options`` receives: ``read_overrides(...)`` of the
#: options the user passed (``ReadSettings`` field names).
ReadGiven = Mapping[str, Any]
#: The default of a command's ``given`` parameter (always replaced by the decorator).
NOT_GIVEN: ReadGiven = MappingProxyType({})


def with_read_options(*, answers: bool = False,
                      only: tuple[str, ...] = ()) -> Callable[[Command], Command]:
    """Give a command the read-setting options (and, with ``answers``, who answers; or
    ``only`` those named, in that order): the command declares ``given: ReadGiven =
    NOT_GIVEN`` and receives ``read_overrides(...)`` of what the user passed there; Typer sees
    the options, placed where ``given`` stands."""
    every = {**READ_OPTIONS, **ANSWER_OPTIONS}
    options = {name: every[name] for name in only} if only else \
        {**READ_OPTIONS, **(ANSWER_OPTIONS if answers else {})}

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
            given = read_overrides({name: kwargs.pop(name, None) for name in options})
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
    """Print ``exc`` as a red error line (``where`` before the message; URLs redacted) and
    exit ``code``."""
    from rich.markup import escape

    from app.engine import redact_url

    err_console.print(f"[red]error:[/red] {escape(redact_url(where + exc.message))}",
                      highlight=False,
                      soft_wrap=True)
    raise typer.Exit(code) from exc
