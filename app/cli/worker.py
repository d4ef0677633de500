"""``dreads worker``: a Celery worker for ``workers.celery_app`` with dreads' defaults.

Same as ``celery -A workers.celery_app worker -Q dreads.reads -P prefork -c 2 -n dreads@%h``;
``--upstream``, ``--database`` and ``--broker`` override ``DREADS_UPSTREAM``,
``DREADS_DATABASE_URL`` and ``DREADS_BROKER_URL`` for this worker and its pool processes.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from app.cli._app import app
from app.cli.options import err_console
from app.config import get_settings
from app.errors import DreadsError
from workers.constants import QUEUE

__all__ = ["worker", "worker_argv"]

POOLS = ("prefork", "solo", "threads")


def worker_argv(*, concurrency: int, pool: str, loglevel: str, hostname: str,
                extra: list[str]) -> list[str]:
    """The ``celery`` command line (without the program name) that starts the worker."""
    return ["-A", "workers.celery_app", "worker", "-Q", QUEUE, "-P", pool, "-c",
            str(concurrency), "-n", hostname, "--loglevel", loglevel, *extra]


def _apply_overrides(upstream: str | None, database: str | None, broker: str | None) -> None:
    """Flags win over the environment; pool children inherit it."""
    for name, value in (("DREADS_UPSTREAM", upstream), ("DREADS_DATABASE_URL", database),
                        ("DREADS_BROKER_URL", broker)):
        if value:
            os.environ[name] = value
    get_settings.cache_clear()


def _check_database(url: str) -> None:
    from app.store.db import make_engine
    from app.store.migrate import check_schema

    engine = make_engine(url)
    try:
        check_schema(engine)
    finally:
        engine.dispose()


@app.command(
    "worker",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def worker(
    ctx: typer.Context,
    concurrency: Annotated[int, typer.Option(
        "--concurrency", "-c", min=1, help="Pool processes (each runs one chunk at a time, "
        "its reads concurrently).")] = 2,
    pool: Annotated[str, typer.Option("--pool", "-P", help="prefork, solo or threads.")
                    ] = "prefork",
    loglevel: Annotated[str, typer.Option("--loglevel", "-l")] = "INFO",
    hostname: Annotated[str, typer.Option("--hostname", "-n")] = "dreads@%h",
    upstream: Annotated[str | None, typer.Option(
        help="Model server URL. Default: DREADS_UPSTREAM.", show_default=False)] = None,
    database: Annotated[str | None, typer.Option(
        help="SQLAlchemy URL. Default: DREADS_DATABASE_URL.", show_default=False)] = None,
    broker: Annotated[str | None, typer.Option(
        help="Broker URL. Default: DREADS_BROKER_URL.", show_default=False)] = None,
) -> None:
    """Start a worker: it waits for its upstream, then runs chunks from the dreads.reads queue
    and sweeps lost work. Extra Celery worker options are passed through."""
    if pool not in POOLS:
        err_console.print(f"[red]error:[/red] --pool must be one of {', '.join(POOLS)}")
        raise typer.Exit(2)
    _apply_overrides(upstream, database, broker)
    try:
        _check_database(get_settings().database_url)
    except DreadsError as exc:
        err_console.print(f"[red]error:[/red] {exc.message}", highlight=False)
        raise typer.Exit(2) from exc
    from celery.bin.celery import celery as celery_cli

    argv = worker_argv(concurrency=concurrency, pool=pool, loglevel=loglevel,
                       hostname=hostname, extra=list(ctx.args))
    celery_cli.main(args=argv, prog_name="dreads worker", standalone_mode=True)
