"""``dreads serve``: the HTTP API (runs, and Jev's ``/v1/systemone``) with uvicorn."""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Annotated

import typer

from app.cli._app import SERVERS, app
from app.cli._wiring import resolve_engine
from app.cli.engine import DeviceOpt, DtypeOpt, EngineOpt
from app.cli.options import (
    DEFAULT_WAIT_S,
    NOT_GIVEN,
    BrokerOpt,
    ChunkSizeOpt,
    DatabaseOpt,
    ReadGiven,
    WaitOpt,
    base_read_settings,
    checked_url,
    cli_errors,
    database_url,
    err_console,
    with_read_options,
)
from app.errors import ConfigError

__all__ = ["serve"]

_API = "API"


class Executor(StrEnum):
    AUTO = "auto"
    LOCAL = "local"
    QUEUE = "queue"


def check_exposure(host: str, api_key: str | None, *, insecure: bool) -> None:
    """Refuse an open API beyond this machine, and a placeholder key (unless ``insecure``);
    a key shorter than ``MIN_SECRET_CHARS`` beyond this machine (``insecure`` or not).

    Raises:
        ConfigError: what to set instead.
    """
    from app.cli.flower import MIN_SECRET_CHARS, PLACEHOLDER_PASSWORDS, is_loopback

    if api_key and not is_loopback(host) and len(api_key) < MIN_SECRET_CHARS:
        raise ConfigError(f"DREADS_API_KEY has {len(api_key)} characters; dreads serve on {host} "
                          f"needs at least {MIN_SECRET_CHARS} (python3 -c \"import secrets; "
                          "print(secrets.token_urlsafe(32))\")")
    if insecure:
        return
    if not api_key and not is_loopback(host):
        raise ConfigError(
            f"dreads serve on {host} needs DREADS_API_KEY: anyone who reaches it could submit "
            "runs and spend the GPU. Set DREADS_API_KEY to a long random string, or pass "
            "--insecure on a trusted network")
    if api_key and api_key.strip().lower() in PLACEHOLDER_PASSWORDS:
        raise ConfigError(f"DREADS_API_KEY is a placeholder ({api_key!r}); set a long random "
                          "key (python3 -c \"import secrets; print(secrets.token_urlsafe(32))\")")


#: Libraries that log a line per request or per migration step at INFO: only from --log-level
#: debug on.
_CHATTY = ("httpx", "httpcore", "alembic")


def _configure_logging(log_level: str) -> None:
    level = logging.getLevelName(log_level.upper())
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if level != logging.DEBUG:
        for name in _CHATTY:
            logging.getLogger(name).setLevel(max(logging.WARNING, level))


def _check_store(url: str) -> None:
    """Open the store once before the server starts, so that a bad --database-url is one line
    here rather than a traceback from the server's startup."""
    from app.cli.run import embedded_store
    from app.store.db import disposing
    from app.store.migrate import open_store
    from app.store.urls import sqlite_path

    path = sqlite_path(url)
    if path is None:
        with disposing(open_store(url)):
            return
    with embedded_store(path):
        return


def _check_answer_key(path: str) -> None:
    """Read the simulator's answer key once before the server starts, so that a missing or
    malformed one is one line here (exit 2) rather than a traceback from the server's startup,
    and what it does not match in its job file is said here.

    Raises:
        ConfigError: the key cannot be read, or a line of it is not an answer-key line.
    """
    from rich.markup import escape

    from app.sim.key import AnswerKey

    for warning in AnswerKey.load(path).warnings:
        err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False,
                          soft_wrap=True)


@app.command("serve", rich_help_panel=SERVERS)
@with_read_options(answers=False)
def serve(
    host: Annotated[str | None, typer.Option(help="Interface (DREADS_API_HOST, 127.0.0.1).",
                                             rich_help_panel=_API)] = None,
    port: Annotated[int | None, typer.Option(help="Port (DREADS_API_PORT, 8000).",
                                             rich_help_panel=_API)] = None,
    upstream: Annotated[str | None, typer.Option(
        "--upstream", callback=checked_url,
        help="vLLM base URL, or 'sim' for a simulator in this process "
        "(DREADS_UPSTREAM).")] = None,
    sim_key: Annotated[str | None, typer.Option(
        "--sim-key", help="With --upstream sim: the simulator's answer key (JSONL lines "
        "{state, question, label}; X.key.jsonl is read against X.jsonl beside it).")] = None,
    executor: Annotated[Executor, typer.Option(
        help="Who runs submitted runs: local (this process), queue (Celery workers), auto: "
        "local for SQLite, queue otherwise (DREADS_API_EXECUTOR).", rich_help_panel=_API)]
    = Executor.AUTO,
    record: Annotated[str | None, typer.Option(
        "--record", help="Record every /v1/systemone answer into this run "
        "(DREADS_API_RECORD_RUN).", rich_help_panel=_API)] = None,
    max_concurrent: Annotated[int | None, typer.Option(
        min=1, help="/v1/systemone requests answered at once; more get 529 "
        "(DREADS_API_MAX_CONCURRENT, 256).", rich_help_panel=_API)] = None,
    insecure: Annotated[bool, typer.Option(
        "--insecure", help="Allow no DREADS_API_KEY on a non-loopback host, or a placeholder "
        "key.", rich_help_panel=_API)] = False,
    wait: WaitOpt = DEFAULT_WAIT_S,
    given: ReadGiven = NOT_GIVEN,
    database: DatabaseOpt = None, broker: BrokerOpt = None, chunk_size: ChunkSizeOpt = None,
    engine: EngineOpt = None, device: DeviceOpt = None, dtype: DtypeOpt = None,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "info",
) -> None:
    """Serve the HTTP API: runs over HTTP and Jev's POST /v1/systemone (docs at /docs).

    Set DREADS_API_KEY to require 'Authorization: Bearer <key>' on every /v1 route and on
    /metrics (Prometheus; per-run gauges cached DREADS_METRICS_CACHE_S seconds, for the
    DREADS_METRICS_MAX_RUNS most recent runs). A live page per run at /runs/NAME (with a key:
    log in once at /login).
    """
    import asyncio

    import uvicorn

    from app.api import create_app
    from app.api.config import serve_config, serve_upstream
    from app.config import get_settings, run_env
    from app.engine import redact_url
    from app.runs.settings import wait_served_settings

    env = get_settings()
    for_runs = run_env(env)
    overrides = dict(given)
    db_url = database_url(database)
    with cli_errors():
        check_exposure(host or env.api_host, env.api_key, insecure=insecure)
        choice = resolve_engine(None, engine=engine, device=device, dtype=dtype, env=for_runs)
        url = serve_upstream(env, choice, upstream, overrides.get("model"))
        settings = base_read_settings(overrides, env=for_runs, engine=choice.engine)
        if url != "sim":
            settings = asyncio.run(wait_served_settings(url, settings, overrides, choice, wait,
                                                        env=for_runs))
        elif "tokenizer" not in overrides:
            settings = base_read_settings(overrides, env=for_runs, engine=choice.engine,
                                          upstream="sim")
        config = serve_config(
            env, upstream=url, settings=settings, database_url=db_url, engine=choice,
            executor=executor.value, broker_url=broker, record_run=record,
            max_concurrent=max_concurrent, chunk_size=chunk_size, sim_key=sim_key,
            host=host or env.api_host)
        if url == "sim" and sim_key:
            _check_answer_key(sim_key)
        _check_store(db_url)
    _configure_logging(log_level)
    where = f"http://{host or env.api_host}:{port or env.api_port}"
    err_console.print(f"dreads serve: {settings.model} via {redact_url(url)} "
                      f"({config.executor} executor, store {db_url.split('://')[0]}); "
                      f"docs at {where}/docs"
                      + ("" if config.api_key else "; no API key set (DREADS_API_KEY)"),
                      highlight=False, soft_wrap=True)
    uvicorn.run(create_app(config), host=host or env.api_host, port=port or env.api_port,
                log_level=log_level.lower(), lifespan="on")
