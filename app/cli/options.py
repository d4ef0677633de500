"""Typer options shared by the run commands (``submit``, ``run``, ``resume``) and CLI helpers.

Every run-setting option defaults to ``None`` ("not given"): ``submit``/``run`` fill the gaps
from ``Settings`` (``DREADS_*``) and ``ReadSettings`` defaults, while ``resume`` compares only
the options the user actually gave against the run's recorded settings.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

from app.engine import AnswerBy, Endpoint, Layout, PolicyName, ReadMode, ReadSettings
from app.errors import DreadsError, InputError, SchemaNotReady
from app.store.urls import DEFAULT_DATABASE_URL
from app.store.urls import database_url as _as_url

if TYPE_CHECKING:
    from app.store.types import SessionFactory

STANDIN = "standin"  #: the stand-in tokenizer name (app.upstream.tokenizer.STANDIN)
#: How long commands wait for an upstream to be ready, unless --wait / DREADS_WAIT_S.
DEFAULT_WAIT_S = 60.0

__all__ = [
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
    "JobFileArg",
    "JsonOpt",
    "LayoutOpt",
    "MaxDrawsOpt",
    "ModeOpt",
    "ModelOpt",
    "PolicyOpt",
    "ReplicatesOpt",
    "RunArg",
    "SeedOpt",
    "StepsOpt",
    "ThresholdOpt",
    "TokenizerOpt",
    "UpstreamOpt",
    "WaitOpt",
    "base_read_settings",
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
]

# emoji=False: a user's text (a run name, a reason) is printed as written, never ":x:" -> ❌
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

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
AnswerByOpt = Annotated[
    AnswerBy | None,
    typer.Option("--answer-by", help="Who answers the run's decisions: reads (dreads' own "
                 "multi-draw reads, the default), systemone or decisions (a decision endpoint "
                 "at --answer-url: one request per decision, one draw per question). Its API "
                 "key comes from DREADS_ANSWER_API_KEY only; DREADS_ANSWER_TIMEOUT_S (120) "
                 "and DREADS_ANSWER_GIVE_UP_S (300: how long 429/5xx are retried) tune it.",
                 rich_help_panel=_ANSWER),
]
AnswerUrlOpt = Annotated[
    str | None,
    typer.Option("--answer-url", help="Base URL of the decision endpoint (vLLM, a hosted "
                 "API, another dreads serve; 'sim' for the built-in simulator). Default: the "
                 "run's --upstream, so vLLM's own reader on the same pod.",
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
    typer.Option("--upstream", help="vLLM base URL, or 'sim' (default: DREADS_UPSTREAM if "
                 "set, else the run's own upstream, else http://127.0.0.1:8001)."),
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
RunArg = Annotated[str, typer.Argument(metavar="RUN", help="Run name.", show_default=False)]
JobFileArg = Annotated[Path, typer.Argument(
    metavar="FILE", show_default=False, readable=False,  # checked by app.jobfile, in one line
    help="Job file: JSON lines, one decision per line (see examples/).")]
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


def read_overrides(
    *,
    model: str | None = None,
    tokenizer: str | None = None,
    canvas: int | None = None,
    canvas_step: int | None = None,
    layout: Layout | None = None,
    mode: ReadMode | None = None,
    policy: PolicyName | None = None,
    draws: int | None = None,
    threshold: float | None = None,
    max_draws: int | None = None,
    steps: int | None = None,
    constrained: bool | None = None,
    endpoint: Endpoint | None = None,
    seed: int | None = None,
    answer_by: AnswerBy | None = None,
    answer_url: str | None = None,
    answer_rps: float | None = None,
    answer_concurrency: int | None = None,
) -> dict[str, Any]:
    """The ``ReadSettings`` fields the user gave on the command line (None = not given)."""
    given = {
        "model": model, "tokenizer": tokenizer, "canvas_length": canvas,
        "canvas_step": canvas_step, "layout": layout, "read_mode": mode, "policy": policy,
        "fixed_draws": draws, "threshold": threshold, "max_draws": max_draws, "steps": steps,
        "constrained": constrained, "endpoint": endpoint, "seed": seed,
        "answer_by": answer_by, "answer_url": answer_url, "answer_rps": answer_rps,
        "answer_concurrency": answer_concurrency,
    }
    if draws is not None and policy is None:
        given["policy"] = PolicyName.FIXED
    return {name: value for name, value in given.items() if value is not None}


def base_read_settings(overrides: dict[str, Any], *, engine: str = "vllm",
                       upstream: str | None = None) -> ReadSettings:
    """Defaults from ``DREADS_*`` (model, tokenizer, canvas), then the given overrides.

    Model and tokenizer the user set neither by flag nor by ``DREADS_MODEL`` /
    ``DREADS_TOKENIZER`` come from the server at ``upstream``: its served model id, whose
    tokenizer builds the canvases (the stand-in tokenizer for the simulator; ``upstream`` "sim"
    needs no request). With the in-process ``transformers`` engine the canvases are built with
    the checkpoint's own tokenizer (the model), unless ``--tokenizer`` was given.

    Raises:
        ConfigError: the server must be asked and cannot be reached.
    """
    from app.config import get_settings

    env = get_settings()
    base = ReadSettings(model=env.model, tokenizer=env.tokenizer, canvas_length=env.canvas)
    settings = replace(base, **overrides)
    if engine == "transformers":
        if "tokenizer" not in overrides:
            settings = replace(settings, tokenizer=settings.model)
        return settings
    return _served_defaults(settings, overrides, env.model_fields_set, upstream)


def endpoint_read_settings(overrides: dict[str, Any], *, upstream: str) -> ReadSettings:
    """The settings of a new run answered by a decision endpoint: ``answer_url`` defaults to
    ``upstream`` (vLLM's own reader on the same pod); the model, when set neither by flag nor
    by ``DREADS_MODEL``, is the one the endpoint serves (``GET /v1/models`` with
    ``DREADS_ANSWER_API_KEY``); no canvas is built here, so the tokenizer is the stand-in
    unless given.

    Raises:
        ConfigError: the endpoint must be asked for its model and cannot be.
    """
    from app.config import get_settings

    env = get_settings()
    given = dict(overrides)
    given.setdefault("answer_url", upstream)
    given.setdefault("tokenizer", STANDIN)
    settings = replace(ReadSettings(model=env.model, canvas_length=env.canvas), **given)
    if "model" in given or "model" in env.model_fields_set or settings.answer_url == "sim":
        return settings
    from app.config import answer_api_key
    from app.upstream.served import served_identity

    served = served_identity(settings.answer_url, api_key=answer_api_key() or "")
    return replace(settings, model=served.model_id)


def _missing_served(overrides: dict[str, Any], from_env: set[str]) -> set[str]:
    return {name for name in ("model", "tokenizer")
            if name not in overrides and name not in from_env}


def served_fields_missing(overrides: dict[str, Any]) -> bool:
    """Whether the model or the tokenizer must come from the server (set nowhere else)."""
    from app.config import get_settings

    return bool(_missing_served(overrides, get_settings().model_fields_set))


def _served_defaults(settings: ReadSettings, overrides: dict[str, Any],
                     from_env: set[str], upstream: str | None) -> ReadSettings:
    missing = _missing_served(overrides, from_env)
    if not missing or upstream is None:
        return settings
    if upstream == "sim":
        return replace(settings, tokenizer=STANDIN) if "tokenizer" in missing else settings
    from app.upstream.served import served_identity

    served = served_identity(upstream)
    if "model" in missing:
        settings = replace(settings, model=served.model_id)
    if "tokenizer" in missing:
        settings = replace(settings, tokenizer=STANDIN if served.is_sim else settings.model)
    return settings


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
    """Map dreads errors to a red message and an exit code (2 input/schema, 1 otherwise)."""
    try:
        yield
    except (InputError, SchemaNotReady) as exc:
        exit_error(exc, 2)
    except DreadsError as exc:
        exit_error(exc, 1)


def exit_error(exc: DreadsError, code: int, *, where: str = "") -> NoReturn:
    """Print ``exc`` as a red error line (``where`` before the message) and exit ``code``."""
    from rich.markup import escape

    err_console.print(f"[red]error:[/red] {escape(where + exc.message)}", highlight=False,
                      soft_wrap=True)
    raise typer.Exit(code) from exc
