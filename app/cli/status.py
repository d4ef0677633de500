"""``dreads runs`` and ``dreads status``: the runs, and one run's progress."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli import _render as render
from app.cli._app import INSPECT, app
from app.cli._store import plain_read, store_session
from app.cli.options import (
    DatabaseOpt,
    JsonOpt,
    RunArg,
    cli_errors,
    console,
    database_url,
    opened_store,
)

if TYPE_CHECKING:
    from app.store.status_sql import Reader, RunStatusReport
    from app.store.types import SessionFactory

log = logging.getLogger("dreads.cli")


__all__ = ["runs", "status"]


@app.command(rich_help_panel=INSPECT)
def runs(json_out: JsonOpt = False, database: DatabaseOpt = None) -> None:
    """List the runs with their settings and decision counts by status."""
    from app.store import status_sql

    overview = plain_read(database, status_sql.list_runs)
    if overview is None:
        from app.store.views import list_runs

        with cli_errors(), store_session(database) as session:
            overview = list_runs(session)
    if json_out:
        console.print_json(render.json_text([o.as_dict() for o in overview]))
    elif not overview:
        console.print("no runs in this database yet: `dreads run FILE` or `dreads submit FILE "
                      "--run NAME` starts one", highlight=False, markup=False)
    else:
        console.print(render.runs_table(overview))


@app.command(rich_help_panel=INSPECT)
def status(
    run: RunArg,
    json_out: JsonOpt = False,
    watch: Annotated[bool, typer.Option(
        "--watch", help="Refresh until the run has ended (Ctrl-C stops); not on a terminal, "
                        "a line per interval.")] = False,
    interval_s: Annotated[float, typer.Option(
        "--interval", min=0.2, metavar="SECONDS", help="Watch period.")] = 2.0,
    database: DatabaseOpt = None,
) -> None:
    """Counts by status, per cell what went wrong, why, and the rate and ETA (SQL only)."""
    watching = watch and not json_out
    report = None if watching else plain_read(database, lambda reader: _plain_status(reader, run))
    if report is None:
        with cli_errors(), opened_store(database_url(database)) as factory:
            if watching:
                from app.cli._watch import watch as watch_status

                watch_status(lambda: _status(factory, run), interval_s)
                return
            report = _status(factory, run)
    if json_out:
        console.print_json(render.json_text(report.as_dict()))
    else:
        console.print(render.status_view(report))


def _plain_status(reader: Reader, name: str) -> RunStatusReport | None:
    from app.store import status_sql

    info = status_sql.find_run(reader, name)
    return None if info is None else status_sql.run_status(reader, info)


def _status(factory: SessionFactory, name: str) -> RunStatusReport:
    from app.store.db import session_scope
    from app.store.runs import require_run
    from app.store.views import run_status

    with session_scope(factory) as session:
        return run_status(session, require_run(session, name))
