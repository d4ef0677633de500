"""``dreads submit``, ``runs``, ``status``, ``resume``, ``cancel``, ``delete``, ``export``.

Each command parses options, calls an importable function (``app.runs.submit``,
``app.runs.resume``, ``app.store.*``), prints, and exits with a code: 0 ok, 1 failure, 2 a
user error (nothing done), 3 bad lines with ``--fail-on-bad-lines``. The store, Celery and
the HTTP client are imported inside the commands, so that ``dreads status`` starts fast.
"""

from __future__ import annotations

import csv
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from app.cli import _render as render
from app.cli._app import INSPECT, RUN_JOBS, app
from app.cli._files import atomic_output, check_output_path
from app.cli._wait import suggest_wait, wait_for_run
from app.cli._wiring import (
    existing_run,
    resolve_engine,
    resolve_settings,
    run_upstream,
    upstream_url,
)
from app.cli.dryrun import (
    DryRunArgs,
    DryRunOpt,
    GpuPriceHourOpt,
    MaxCostOpt,
    PriceInputOpt,
    PriceOutputOpt,
    ReadsPerSecondOpt,
    Spend,
    dry_run_command,
)
from app.cli.engine import DeviceOpt, DtypeOpt, EngineOpt
from app.cli.options import (
    NOT_GIVEN,
    RUN_WAIT_S,
    BrokerOpt,
    ChunkSizeOpt,
    DatabaseOpt,
    FailOnBadLinesOpt,
    ImageDirsOpt,
    JobFileArg,
    JsonOpt,
    ReadGiven,
    ReplaceChangedOpt,
    RunArg,
    RunWaitOpt,
    UpstreamOpt,
    cli_errors,
    console,
    database_url,
    err_console,
    opened_store,
    with_read_options,
)
from app.engine import SIMULATOR_LINE
from app.errors import InputError

if TYPE_CHECKING:
    from app.config import Settings
    from app.runs.reports import ResumeReport, SweepReport
    from app.runs.resume import Proceed
    from app.store.csv_export import CsvExport
    from app.store.records import RunInfo
    from app.store.status_sql import Reader, RunStatusReport
    from app.store.types import Session, SessionFactory

log = logging.getLogger("dreads.cli")

__all__ = ["cancel", "delete", "export", "resume", "runs", "status", "submit"]


@app.command(rich_help_panel=RUN_JOBS)
@with_read_options(answers=True)
def submit(
    file: JobFileArg,
    run: Annotated[str, typer.Option("--run", help="Run name (new or existing).")],
    given: ReadGiven = NOT_GIVEN,
    replicates: Annotated[int | None, typer.Option(
        "--replicates", min=1, help="Copies of each decision with different noise (1).")] = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Refuse the whole file (write nothing) if any line is bad.")] = False,
    fail_on_bad_lines: FailOnBadLinesOpt = False,
    replace_changed: ReplaceChangedOpt = False,
    upstream: UpstreamOpt = None, wait: RunWaitOpt = RUN_WAIT_S,
    chunk_size: ChunkSizeOpt = None,
    broker: BrokerOpt = None, image_dirs: ImageDirsOpt = None,
    json_out: JsonOpt = False, database: DatabaseOpt = None,
    engine: EngineOpt = None, device: DeviceOpt = None, dtype: DtypeOpt = None,
    dry_run: DryRunOpt = False, price_input: PriceInputOpt = None,
    price_output: PriceOutputOpt = None, gpu_price_hour: GpuPriceHourOpt = None,
    reads_per_second: ReadsPerSecondOpt = None, max_cost: MaxCostOpt = None,
) -> None:
    """Validate a job file, store its decisions and queue them for the workers.

    Bad lines are listed with their line numbers and reasons; the good ones are stored
    (unless --strict). Submitting the same file again adds nothing; a line whose id the run
    holds with other content is reported (exit 2), or replaces it with --replace-changed.
    With --dry-run: the decisions, reads, tokens and cost it would take; nothing stored.
    A line's images are fetched and checked here; the workers fetch them again (the same
    DREADS_IMAGE_DIRS must hold for file:// images there).
    """
    from app.broker.process import PublisherProcess
    from app.runs.jobfile import check_job_file

    spend = Spend(price_input, price_output, gpu_price_hour, reads_per_second, max_cost)
    spend.require_dry_run(dry_run)
    if dry_run:
        dry_run_command(DryRunArgs(
            file, run, given, replicates, strict, fail_on_bad_lines, upstream,
            {"engine": engine, "device": device, "dtype": dtype}, json_out, spend,
            image_dirs))
        return
    with cli_errors(), suggest_wait(wait):
        check_job_file(file)
        # started first: its Celery start-up overlaps the tokenizer's and the probe's
        with PublisherProcess(broker, chunk_size) as publisher, \
                opened_store(database_url(database)) as factory:
            from app.config import settings_with
            from app.engine import AnswerBy
            from app.runs.probe import ServerAt
            from app.runs.settings import image_policy
            from app.runs.sources import recorded_path
            from app.runs.submit import SubmitRequest

            env = settings_with(image_dirs=image_dirs)
            existing = existing_run(factory, run)
            choice = resolve_engine(existing, engine=engine, device=device, dtype=dtype,
                                    env=env)
            wait_for_run(upstream, wait, existing, given=given, choice=choice, env=env)
            settings, n_replicates, tok = resolve_settings(
                existing, given, replicates, env=env, engine=choice.engine, upstream=upstream)
            url = run_upstream(upstream, existing, choice, settings, env)
            fingerprint, fp_error = (None, None) if settings.answer_by is not AnswerBy.READS \
                else ServerAt(url, choice).fingerprint(settings, tok)
            request = SubmitRequest(path=file, run_name=run, settings=settings, upstream=url,
                                    engine=choice.engine, replicates=n_replicates,
                                    strict=strict, fingerprint=fingerprint,
                                    replace_changed=replace_changed, images=image_policy(env),
                                    prices=spend.recorded(), sources=(recorded_path(file),))
            report = _submit(factory, request, tok, publisher)
    if json_out:
        console.print_json(render.json_text({**report.as_dict(),
                                             "fingerprint_error": fp_error}))
    else:
        render.submit_report(report, fp_error)
    render.changed_report(report, replace_changed=replace_changed)  # stderr
    if report.refused or report.run is None:
        raise typer.Exit(2)
    if report.changed:
        raise typer.Exit(render.CHANGED_EXIT)
    if fail_on_bad_lines and (report.bad or report.rejected):
        raise typer.Exit(render.BAD_LINES_EXIT)


#: How often the interpreter lock is handed between submit's threads: the thread that parses
#: holds it nearly all the time, and at the default 5 ms the one that streams rows to the
#: database (and mostly waits on it) would wait that long each time it has bytes to send.
_SUBMIT_SWITCH_S = 0.0005


def _streaming_runtime() -> None:
    """A submit makes each batch's objects by the hundred thousand and frees nearly all of
    them by reference counting; it makes no reference cycles. So the cyclic collector, which
    would walk them again and again (4% of a million-decision submit), is off for the rest of
    the command, what start-up loaded is frozen out of its way, and memory stays flat (150
    MiB at 200,000 and at 1,000,000 decisions). The interpreter lock changes hands every
    ``_SUBMIT_SWITCH_S``."""
    import gc

    from app.cli import keep_gc_off

    gc.freeze()
    keep_gc_off()
    sys.setswitchinterval(_SUBMIT_SWITCH_S)


def _submit(factory: SessionFactory, request: Any, tokenizer: Any, publisher: Any) -> Any:
    """Stream the file into the store, publishing each batch (through ``publisher``, an
    ``app.broker.process.PublisherProcess``) to the queue of the run's model and canvas; a
    file of only bad lines leaves no run behind."""
    from app.broker.names import queue_of_run
    from app.engine import settings_to_dict
    from app.runs.submit import submit_job
    from app.store.admin import discard_empty_run

    _streaming_runtime()
    publisher.bind(run_name=request.run_name,
                   queue=queue_of_run(settings_to_dict(request.settings)))
    report = submit_job(request, factory, tokenizer, publisher=publisher)
    discard_empty_run(factory, report)
    return report


@app.command(rich_help_panel=INSPECT)
def runs(json_out: JsonOpt = False, database: DatabaseOpt = None) -> None:
    """List the runs with their settings and decision counts by status."""
    from app.store import status_sql

    overview = _plain(database, status_sql.list_runs)
    if overview is None:
        from app.store.views import list_runs

        with cli_errors(), _session(database) as session:
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
    report = None if watching else _plain(database, lambda reader: _plain_status(reader, run))
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


T = TypeVar("T")


def _plain(database: str | None, read: Callable[[Reader], T | None]) -> T | None:
    """``read`` over the store through a bare driver connection, without loading SQLAlchemy
    (``app.store.plain``): a third of the start-up of the full store. None when that cannot
    answer (a store of another revision, a run not there, any error): the caller then takes
    the full path, which says what is wrong."""
    from app.store.plain import open_plain

    try:
        with open_plain(database_url(database)) as reader:
            return None if reader is None else read(reader)
    except Exception:
        log.debug("the plain read path could not answer", exc_info=True)
        return None


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
        settled = _plain(database, lambda reader: _plain_settled(reader, run, dry_run))
        if settled is not None:
            _print_resume(settled, json_out)
            return
    from app.config import get_settings
    from app.runs.probe import ServerAt
    from app.runs.resume import ResumeOptions, resume_run
    from app.store.runs import load_run

    env = get_settings()
    options = ResumeOptions(retry_failed=retry_failed, dry_run=dry_run, force=force,
                            requeue_after_s=env.requeue_after_s, prices=prices)
    url = database_url(database)
    with cli_errors(), suggest_wait(wait), opened_store(url) as factory:
        info = load_run(factory, run)
        choice = resolve_engine(info, engine=engine, device=device, dtype=dtype, env=env)
        wait_for_run(upstream, wait, info, given=given, choice=choice, env=env)
        server = ServerAt(upstream_url(upstream, info, env), choice)
        if url.startswith("sqlite") and not dry_run:  # the embedded mode: run it here
            from app.cli.run import resume_embedded

            report = resume_embedded(factory, url, info, given, options, server, env)
        else:
            proceed = _sweep_and_publish(factory, env, broker, chunk_size)
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
        from app.runs.settings import sweep_policy
        from app.runs.sweep import RESUME_LOCK_WAIT_S, sweep_once

        with make_sender(env, broker) as sender:
            return sweep_once(factory, sender, sweep_policy(env, chunk_size=chunk_size),
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


@app.command(rich_help_panel=RUN_JOBS)
def cancel(run: RunArg, json_out: JsonOpt = False, database: DatabaseOpt = None) -> None:
    """Cancel a run: no worker starts its decisions; those in flight finish. A finished or
    cancelled run is left as it is."""
    from app.store.admin import cancel_run
    from app.store.runs import require_run

    with cli_errors(), _session(database) as session:
        info = require_run(session, run)
        outcome = cancel_run(session, info.id)
    if json_out:
        console.print_json(render.json_text({"run": run, **outcome.as_dict()}))
        return
    for line in render.cancel_lines(run, outcome):
        console.print(line, highlight=False, markup=False)


@app.command(rich_help_panel=RUN_JOBS)
def delete(
    run: RunArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
    = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Delete even while workers hold some of its decisions.")] = False,
    database: DatabaseOpt = None,
) -> None:
    """Delete a run with its decisions, answers, draws and attempts (asks first)."""
    from app.store.admin import delete_run, run_contents
    from app.store.db import session_scope
    from app.store.runs import require_run

    with cli_errors(), opened_store(database_url(database)) as factory:
        with session_scope(factory) as session:
            info = require_run(session, run)
            contents = run_contents(session, info.id)
        _check_deletable(run, contents.in_flight, force=force)
        what = (f"run {run!r}: {contents.decisions} decision(s), {contents.answers} "
                f"answer(s), {contents.draws} draw(s), {contents.attempts} attempt(s)")
        _confirm(f"delete {what}? This cannot be undone.", yes=yes)
        with session_scope(factory) as session:
            delete_run(session, info.id)
    console.print(f"deleted {what}", highlight=False, markup=False)


def _check_deletable(run: str, in_flight: int, *, force: bool) -> None:
    if in_flight and not force:
        raise InputError(f"{in_flight} decision(s) of run {run!r} are in flight on workers; "
                         f"`dreads cancel {run}`, let them finish, then delete (or pass "
                         "--force)")


def _confirm(question: str, *, yes: bool) -> None:
    """Ask ``question`` on a terminal; refuse to guess when no one can answer."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise InputError("not deleting without confirmation: pass --yes to delete from a "
                         "script")
    if not typer.confirm(question, default=False, err=True):
        err_console.print("nothing deleted")
        raise typer.Exit(0)


class ExportFormat(StrEnum):
    JSONL = "jsonl"
    CSV = "csv"
    OPENAI_BATCH = "openai-batch"


@app.command(rich_help_panel=INSPECT)
def export(
    run: RunArg,
    fmt: Annotated[ExportFormat, typer.Option(
        "--format", help="jsonl, csv, or openai-batch (OpenAI's Batch output lines, each "
        "body a Decision with dreads' diagnostics).")]
    = ExportFormat.JSONL,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="FILE",
        help="Write to FILE (replaced only once the export succeeded; never a run's job file "
        "or answer key); default stdout.")]
    = None,
    with_state: Annotated[bool, typer.Option(
        "--with-state", help="Add each decision's state text (csv: a 'state' column; jsonl: "
        "a 'state' field, as stored). Off by default: states are most of a run's size.")]
    = False,
    database: DatabaseOpt = None,
) -> None:
    """One line per decision with every answer and diagnostic (streamed from SQL); csv
    columns: docs/commands.md#export."""
    from app.runs.sources import check_not_run_file
    from app.store.runs import require_run
    from app.store.sources import source_files

    with cli_errors():
        if with_state and fmt is ExportFormat.OPENAI_BATCH:
            raise InputError("--with-state is for --format csv or jsonl (an OpenAI Batch "
                             "output line has no state); leave it out or change --format")
        if output is not None:
            check_output_path(output)
        with _session(database) as session:
            info = require_run(session, run)
            if output is not None and str(output) != "-":
                sources = [path for _, path in source_files(session, run)]
                check_not_run_file(session, output, option="-o",
                                   instead=render.answers_file(run, fmt.value, sources))
            with atomic_output(output, newline="") as out:
                n = _write_export(out, session, info, fmt, with_state=with_state)
            spend_line = _spend_line(session, info)
    if output is not None and str(output) != "-":
        err_console.print(f"exported {n} decision(s) of run {run!r} to {output}",
                          highlight=False, markup=False)
    err_console.print(f"spend of run {run!r}: {spend_line}", highlight=False, markup=False)
    if info.simulator:
        err_console.print(SIMULATOR_LINE, style="bold yellow", highlight=False,
                          markup=False)


def _spend_line(session: Session, info: RunInfo) -> str:
    """What the exported run spent (``status``'s line), for the export's closing message."""
    from app.store.spend import spend_of
    from app.store.views import status_counts

    counts = status_counts(session, info.id)
    return spend_of(session, info.id).line(counts.get("done", 0), sum(counts.values()))


def _write_export(out: IO[str], session: Session, info: RunInfo, fmt: ExportFormat, *,
                  with_state: bool) -> int:
    """Write the run in ``fmt``; the number of decisions written."""
    from app.store.views import iter_export

    if fmt is ExportFormat.JSONL:
        return _write_jsonl(out, iter_export(session, info.id, with_state=with_state))
    if fmt is ExportFormat.OPENAI_BATCH:
        from app.store.openai_export import iter_openai_batch

        model = str(info.settings.get("model", ""))
        return _write_jsonl(out, iter_openai_batch(session, info.id, model))
    from app.store.csv_export import csv_export

    return _write_csv(out, csv_export(session, info, with_state=with_state))


@contextmanager
def _session(database: str | None) -> Iterator[Session]:
    from app.store.db import session_scope

    with opened_store(database_url(database)) as factory, session_scope(factory) as session:
        yield session


def _write_jsonl(out: IO[str], records: Iterator[dict[str, Any]]) -> int:
    import orjson

    n = 0
    for record in records:
        out.write(orjson.dumps(record, default=str).decode() + "\n")
        n += 1
    return n


def _write_csv(out: IO[str], table: CsvExport) -> int:
    """The header, then one row per decision; the number of rows."""
    writer = csv.DictWriter(out, fieldnames=table.columns)
    writer.writeheader()
    n = 0
    for row in table.rows:
        writer.writerow(row)
        n += 1
    return n
