"""``dreads resume``: a run's unfinished decisions queued again."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli import _render as render
from app.cli._app import RUN_JOBS, app
from app.cli._store import plain_read
from app.cli._wait import suggest_wait, wait_for_run
from app.cli._wiring import (
    resolve_engine,
    upstream_url,
)
from app.cli.dryrun import (
    MaxCostOpt,
    PriceInputOpt,
    PriceOutputOpt,
)
from app.cli.engine import DeviceOpt, DtypeOpt, EngineOpt
from app.cli.options import (
    NOT_GIVEN,
    RUN_WAIT_S,
    BrokerOpt,
    ChunkSizeOpt,
    DatabaseOpt,
    JsonOpt,
    ReadGiven,
    RunArg,
    RunWaitOpt,
    UpstreamOpt,
    cli_errors,
    console,
    database_url,
    opened_store,
    with_read_options,
)

if TYPE_CHECKING:
    from app.config import Settings
    from app.runs.reports import ResumeReport, SweepReport
    from app.runs.resume import Proceed
    from app.store.records import RunInfo
    from app.store.status_sql import Reader
    from app.store.types import SessionFactory

log = logging.getLogger("dreads.cli")


__all__ = ["resume"]


@app.command(rich_help_panel=RUN_JOBS)
@with_read_options(answers=True)
def resume(
    run: RunArg,
    retry_failed: Annotated[bool, typer.Option(
        "--retry-failed", help="Put failed decisions back to pending first.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only say what would be done; change nothing.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Continue against a server whose model or canvas differs.")] = False,
    given: ReadGiven = NOT_GIVEN,
    upstream: UpstreamOpt = None, wait: RunWaitOpt = RUN_WAIT_S,
    chunk_size: ChunkSizeOpt = None,
    broker: BrokerOpt = None,
    json_out: JsonOpt = False, database: DatabaseOpt = None,
    engine: EngineOpt = None, device: DeviceOpt = None, dtype: DtypeOpt = None,
    max_cost: MaxCostOpt = None, price_input: PriceInputOpt = None,
    price_output: PriceOutputOpt = None,
) -> None:
    """Continue a run: check settings and server, sweep, (retry failed,) publish what is left.

    The server checked is --upstream, else DREADS_UPSTREAM if set, else the run's own. On a
    SQLite store (the embedded mode) the decisions are run here, in this process.
    """
    prices = {"price_input_per_mtok": price_input, "price_output_per_mtok": price_output,
              "max_cost": max_cost}
    if not given and not retry_failed and not any(v is not None for v in prices.values()):
        # a finished run: answered without the full store
        settled = plain_read(database, lambda reader: _plain_settled(reader, run, dry_run))
        if settled is not None:
            _print_resume(settled, json_out)
            return
    from app.config import get_settings, run_env
    from app.runs.probe import ServerAt
    from app.runs.resume import ResumeOptions, resume_run
    from app.store.db import session_scope
    from app.store.runs import require_run

    settings = get_settings()
    env = run_env(settings)
    options = ResumeOptions(retry_failed=retry_failed, dry_run=dry_run, force=force,
                            requeue_after_s=env.requeue_after_s, prices=prices)
    url = database_url(database)
    with cli_errors(), suggest_wait(wait), opened_store(url) as factory:
        with session_scope(factory) as session:
            info = require_run(session, run)
        choice = resolve_engine(info, engine=engine, device=device, dtype=dtype, env=env)
        wait_for_run(upstream, wait, info, given=given, choice=choice, env=env)
        server = ServerAt(upstream_url(upstream, info, env), choice)
        if url.startswith("sqlite") and not dry_run:  # the embedded mode: run it here
            from app.cli.run import resume_embedded

            report = resume_embedded(factory, url, info, given, options, server, env)
        else:
            proceed = _sweep_and_publish(factory, settings, broker, chunk_size)
            report = resume_run(factory, info, given, options=options, server=server,
                                proceed=proceed)
    if report is not None:
        _print_resume(report, json_out)


def _sweep_and_publish(factory: SessionFactory, env: Settings, broker: str | None,
                       chunk_size: int | None) -> Proceed:
    """How ``resume`` continues a run of the distributed mode: one sweep of the run, which
    publishes what is left (the Celery client made only then)."""
    def proceed(info: RunInfo, _report: ResumeReport) -> SweepReport:
        from app.broker.client import make_sender
        from app.config import run_env
        from app.runs.settings import sweep_policy
        from app.runs.sweep import RESUME_LOCK_WAIT_S, sweep_once

        with make_sender(env, broker) as sender:
            return sweep_once(factory, sender, sweep_policy(run_env(env), chunk_size=chunk_size),
                              run_id=info.id, wait_lock_s=RESUME_LOCK_WAIT_S)

    return proceed


def _plain_settled(reader: Reader, name: str, dry_run: bool) -> ResumeReport | None:
    """The report of a resume with nothing to do, when the run is active and settled (None
    otherwise: the full path checks and says the rest)."""
    from app.store import status_sql
    from app.store.records import RunStatus

    info = status_sql.find_run(reader, name)
    if info is None or info.status != RunStatus.ACTIVE \
            or not status_sql.is_settled(reader, info.id, count_failed=False):
        return None
    from app.runs.reports import settled_report

    return settled_report(info.name, dry_run)


def _print_resume(report: Any, json_out: bool) -> None:
    if json_out:
        console.print_json(render.json_text(report.as_dict()))
    else:
        render.resume_report(report)
