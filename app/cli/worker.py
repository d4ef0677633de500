"""``dreads worker``: a Celery worker for ``workers.celery_app`` with dreads' defaults.

Runs ``celery -A workers.celery_app worker -P prefork -c 2 -n dreads-<pid>@%h`` as a supervised
child (it consumes the queue of the model and canvas its upstream serves): a worker that dies
on its own (Celery/kombu exit with "Unrecoverable error" when the broker is full or gone) is
started again after a capped backoff, forever by default (``app.cli.supervisor``); a stop
signal (SIGTERM, SIGINT, SIGQUIT) is passed on and ends it for good. ``--upstream``,
``--database-url`` and ``--broker`` override ``DREADS_UPSTREAM``, ``DREADS_DATABASE_URL`` and
``DREADS_BROKER_URL`` for this worker and its pool processes (passed in the Celery child's
environment; this process's own is not written). The node name holds this process's id, so
two workers on one host are two nodes to Celery and Flower. ``--metrics-port``
(``DREADS_METRICS_PORT``) serves Prometheus metrics of the worker, its pool children and the
supervisor (served by the supervisor, so they stay up while the Celery worker is down).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from app.cli._app import SERVERS, app
from app.cli.engine import DeviceOpt, DtypeOpt, EngineOpt
from app.cli.options import (
    DatabaseOpt,
    ImageDirsOpt,
    checked_url,
    database_url,
    err_console,
    exit_error,
)
from app.cli.supervisor import Backoff, supervise
from app.errors import EXIT_USAGE, DreadsError
from app.runs.settings import env_upstream

__all__ = ["Backoff", "default_node_name", "supervise", "worker", "worker_argv"]

POOLS = ("prefork", "solo", "threads")


def default_node_name(pid: int | None = None) -> str:
    """``dreads-<pid>@%h``: this process's id (``pid``) and the host (Celery expands ``%h``),
    unique per worker on a host and kept across the supervisor's restarts of its child."""
    return f"dreads-{os.getpid() if pid is None else pid}@%h"


def worker_argv(*, concurrency: int, pool: str, loglevel: str, hostname: str,
                extra: list[str]) -> list[str]:
    """The ``celery`` command line (without the program name) that starts the worker."""
    return ["-A", "workers.celery_app", "worker", "-P", pool, "-c",
            str(concurrency), "-n", hostname, "--loglevel", loglevel, *extra]


def _check_database(url: str) -> None:
    from app.store.db import disposing
    from app.store.migrate import open_store

    with disposing(open_store(url)):
        pass


@app.command(
    "worker",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    rich_help_panel=SERVERS,
)
def worker(
    ctx: typer.Context,
    concurrency: Annotated[int, typer.Option(
        "--concurrency", "-c", min=1, help="Pool processes (each runs one chunk at a time, "
        "its reads concurrently).")] = 2,
    pool: Annotated[str, typer.Option("--pool", "-P", help="prefork, solo or threads.")
                    ] = "prefork",
    loglevel: Annotated[str, typer.Option("--loglevel", "-l")] = "INFO",
    hostname: Annotated[str | None, typer.Option(
        "--hostname", "-n", metavar="NAME@HOST", show_default=False,
        help="Celery node name, as Flower and `celery inspect` list it (%h: the host name, "
        "%n: its first part, %d: its domain). Default: dreads-PID@%h, PID this process's id, "
        "so workers on one host never share a name.")] = None,
    upstream: Annotated[str | None, typer.Option(
        callback=checked_url, help="Model server URL. Default: DREADS_UPSTREAM.",
        show_default=False)] = None,
    database: DatabaseOpt = None,
    broker: Annotated[str | None, typer.Option(
        help="Broker URL. Default: DREADS_BROKER_URL.", show_default=False)] = None,
    engine: EngineOpt = None, device: DeviceOpt = None, dtype: DtypeOpt = None,
    metrics_port: Annotated[int | None, typer.Option(
        min=1, max=65535, help="Serve Prometheus metrics of this worker and its pool on this "
        "port (DREADS_METRICS_PORT; unset: none).", show_default=False)] = None,
    metrics_host: Annotated[str | None, typer.Option(
        help="Interface of the metrics port (DREADS_METRICS_HOST, 127.0.0.1).",
        show_default=False)] = None,
    answers: Annotated[bool, typer.Option(
        "--answers", envvar="DREADS_WORKER_ANSWERS", show_envvar=True,
        help="Serve runs answered by a decision endpoint (--answer-by systemone|decisions: "
        "the dreads.answers queue) instead of reads: no local model server needed, and a "
        "pod's GPU workers never take this work. Each run's endpoint budget is split among "
        "this worker's pool processes; the endpoint's key is DREADS_ANSWER_API_KEY.")] = False,
    image_dirs: ImageDirsOpt = None,
) -> None:
    """Start a Celery worker: it waits for its upstream, then runs chunks and sweeps lost work.

    It takes chunks from the queue of the model and canvas its upstream serves (with --answers:
    the runs answered by decision endpoints); extra Celery worker options are passed through.
    A Celery worker that dies on its own (a Redis that is full or gone) is started again after
    a backoff doubling from DREADS_WORKER_BACKOFF_S (1) to DREADS_WORKER_BACKOFF_MAX_S (60),
    forever unless DREADS_WORKER_GIVE_UP_S is set; nothing is lost meanwhile (SQL keeps the
    work). A run paused by the breaker is probed every DREADS_BREAKER_PROBE_S (10) and resumes
    by itself once its server answers.
    """
    if pool not in POOLS:
        err_console.print(f"[red]error:[/red] --pool must be one of {', '.join(POOLS)}")
        raise typer.Exit(EXIT_USAGE)
    from app.config import run_env, settings_with, to_environ

    # Flags win over the environment: the Celery child (and its pool) gets them as DREADS_*.
    flags = {"upstream": upstream, "database_url": database_url(database) if database else None,
             "broker_url": broker, "engine": engine, "device": device, "dtype": dtype,
             "worker_answers": answers or None, "metrics_port": metrics_port,
             "metrics_host": metrics_host, "image_dirs": image_dirs}
    settings = settings_with(**flags)
    try:
        if not settings.worker_answers:
            env_upstream(run_env(settings))
        _check_database(settings.database_url)
    except DreadsError as exc:
        exit_error(exc, exc.exit_code)
    argv = worker_argv(concurrency=concurrency, pool=pool, loglevel=loglevel,
                       hostname=hostname or default_node_name(), extra=list(ctx.args))
    from app.broker.health import broker_writable
    from app.telemetry.supervisor import SupervisorState, serve_worker_metrics

    env = to_environ(flags, os.environ)
    backoff = Backoff(first_s=settings.worker_backoff_s, max_s=settings.worker_backoff_max_s,
                      give_up_s=settings.worker_give_up_s,
                      healthy_s=max(60.0, settings.worker_backoff_max_s))
    state = SupervisorState()
    with _metrics_dir(settings.metrics_port, env) as metrics:
        if metrics is not None and settings.metrics_port:
            # served here, not by the Celery worker: they stay up while it is down
            env.pop("DREADS_METRICS_PORT", None)
            serve_worker_metrics(settings.metrics_host, settings.metrics_port, metrics, state)
        code = supervise([sys.executable, "-m", "celery", *argv], env=env, backoff=backoff,
                         state=state,
                         broker_ok=lambda: broker_writable(settings.broker_url))
    raise typer.Exit(code)


@contextmanager
def _metrics_dir(port: int | None, env: dict[str, str]) -> Iterator[Path | None]:
    """With metrics on: ``PROMETHEUS_MULTIPROC_DIR`` set up in ``env`` (Celery's and its pool
    children's environment): emptied, or a temporary one removed at exit; yields it (None:
    metrics off)."""
    from app.telemetry.exporter import prepare_multiprocess_dir, remove_multiprocess_dir

    if not port:
        yield None
        return
    path, created = prepare_multiprocess_dir(env)
    try:
        yield path
    finally:
        if created:
            remove_multiprocess_dir(path)
