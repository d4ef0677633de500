"""``dreads run FILE``: the one-command embedded mode (SQLite, in-process executor, no Redis).

Run it again after Ctrl-C or a kill and it continues where it stopped. Everything heavy (the
store, the executor, the simulator, the tokenizer) is imported when the command runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from app.cli import _render as render
from app.cli._app import RUN_JOBS, app
from app.cli._wait import suggest_wait
from app.cli._wiring import ReadChoice, resolve_run
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
    DatabaseOpt,
    FailOnBadLinesOpt,
    ImageDirsOpt,
    JobFileArg,
    JsonOpt,
    ReadGiven,
    ReplaceChangedOpt,
    ReplicatesOpt,
    RunWaitOpt,
    checked_url,
    cli_errors,
    console,
    database_url,
    err_console,
    with_read_options,
)
from app.engine import DEFAULT_UPSTREAM, kind_names
from app.errors import EXIT_INTERRUPTED, EXIT_USAGE, InputError, RunPaused, UpstreamUnavailable

if TYPE_CHECKING:
    from rich.table import Table

    from app.connect.factory import UpstreamConfig
    from app.engine import ReadSettings
    from app.runs.embedded import EmbeddedConfig, ExecutorStats
    from app.runs.env import RunEnv
    from app.runs.probe import ServerAt
    from app.runs.reports import ResumeReport
    from app.runs.resume import ResumeOptions
    from app.store.runs import RunInfo
    from app.store.types import Session, SessionFactory

__all__ = ["embedded_config", "embedded_store", "resume_embedded", "run"]

@dataclass(frozen=True)
class _Job:
    """One embedded execution: where, what, against which upstream."""

    factory: SessionFactory
    db_path: Path
    run: RunInfo
    upstream: str  #: "sim" or a URL (the model for the transformers engine)
    job_file: Path | None
    config: EmbeddedConfig
    quiet: bool = False
    check_server: bool = True  #: compare/record the server fingerprint (resume did already)

    @property
    def engine(self) -> UpstreamConfig:
        return self.config.engine

    @property
    def in_process(self) -> bool:
        """Reads answered by an in-process engine (no server)."""
        from app.connect.engines import is_in_process

        return is_in_process(self.engine.engine)


@app.command(rich_help_panel=RUN_JOBS)
@with_read_options(answers=True)
def run(
    file: JobFileArg,
    upstream: Annotated[str | None, typer.Option(
        "--upstream", callback=checked_url,
        help="vLLM URL, or 'sim' for the built-in simulator (default: "
        f"DREADS_UPSTREAM if set, else the run's own, else {DEFAULT_UPSTREAM}).")] = None,
    database: DatabaseOpt = None,
    run_name: Annotated[str | None, typer.Option(
        "--run", help="Run name (default: the file name without extension).")] = None,
    given: ReadGiven = NOT_GIVEN,
    replicates: ReplicatesOpt = None,
    strict: Annotated[bool, typer.Option("--strict", help="Refuse the file if a line is bad.")]
    = False,
    fail_on_bad_lines: FailOnBadLinesOpt = False,
    replace_changed: ReplaceChangedOpt = False,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Chunks run at once.")] = 4,
    concurrency: Annotated[int, typer.Option(
        "--concurrency", min=1, help="Reads in flight, all chunks together.")] = 64,
    chunk_size: Annotated[int | None, typer.Option(
        "--chunk-size", min=1, help="Decisions each of the --workers claims and answers at a "
        "time (16).")] = None,
    json_out: JsonOpt = False,
    wait: RunWaitOpt = RUN_WAIT_S,
    engine: EngineOpt = None, device: DeviceOpt = None, dtype: DtypeOpt = None,
    image_dirs: ImageDirsOpt = None,
    dry_run: DryRunOpt = False, price_input: PriceInputOpt = None,
    price_output: PriceOutputOpt = None, gpu_price_hour: GpuPriceHourOpt = None,
    reads_per_second: ReadsPerSecondOpt = None, max_cost: MaxCostOpt = None,
) -> None:
    """Run a job file start to finish here: a SQLite file, no Redis, no worker.

    Stores everything in the SQLite file of --database-url (default ./dreads.db); run the same
    command again after Ctrl-C or a crash and it continues where it stopped. Then: [bold]dreads
    report RUN --html report.html[/bold]. With --dry-run: the decisions, reads, tokens and
    cost it would take; nothing stored, nothing read.
    """
    spend = Spend(price_input, price_output, gpu_price_hour, reads_per_second, max_cost)
    spend.require_dry_run(dry_run, embedded=True)
    if dry_run:
        dry_run_command(DryRunArgs(
            file, run_name or file.stem, given, replicates, strict, fail_on_bad_lines,
            upstream, {"engine": engine, "device": device, "dtype": dtype}, json_out, spend,
            image_dirs))
        return
    from app.config import run_env, settings_with
    from app.runs.jobfile import check_job_file
    from app.runs.settings import image_policy
    from app.runs.sources import recorded_path
    from app.runs.submission import Submission, submit_run
    from app.store.db import session_scope
    from app.store.runs import require_run

    name = run_name or file.stem
    env = run_env(settings_with(image_dirs=image_dirs, gpu_price_hour=gpu_price_hour))
    options = ReadChoice(given, upstream, wait, engine, device, dtype)
    with cli_errors(), suggest_wait(wait):
        check_job_file(file)
        db = _sqlite_file(database)
        with _removed_unless_used(db) as used, embedded_store(db) as factory:
            submission = Submission(file, name, replicates, strict, replace_changed,
                                    image_policy(env), spend.recorded(), (recorded_path(file),))
            submitted = submit_run(factory, submission, lambda existing: resolve_run(
                existing, options, env=env, suggest_sim=True))
            report = submitted.report
            if not json_out or report.refused:
                render.submit_report(report, None, queued=False)
            render.changed_report(report, replace_changed=replace_changed)  # stderr
            if report.refused or report.run is None:
                raise typer.Exit(EXIT_USAGE)
            used()
            config = embedded_config(env, submitted.resolved.engine,
                                     chunk_size=chunk_size or 16, workers=workers,
                                     max_in_flight=concurrency)
            with session_scope(factory) as session:
                info = require_run(session, name)
            job = _Job(factory, db, info, submitted.resolved.upstream, file, config,
                       quiet=json_out)
            _execute(job)
            _summary(factory, name, json_out, db)
    if report.changed:
        raise typer.Exit(render.CHANGED_EXIT)
    if fail_on_bad_lines and (report.bad or report.rejected):
        raise typer.Exit(render.BAD_LINES_EXIT)


def _sqlite_file(database: str | None) -> Path:
    """The SQLite file of ``--database-url`` (a path, or a sqlite:/// URL).

    Raises:
        InputError: another kind of database, or a directory.
    """
    from app.store.urls import redacted, sqlite_path

    url = database_url(database)
    path = sqlite_path(url)
    if path is None:
        raise InputError(f"dreads run keeps its runs in a SQLite file, not {redacted(url)}; "
                         "pass --database-url FILE.db, or use `dreads submit` and "
                         "`dreads worker` for PostgreSQL")
    if path.is_dir():
        raise InputError(f"--database-url {str(path)!r} is a directory; give a file such as "
                         f"{str(path / 'dreads.db')!r}")
    return path


@contextmanager
def _removed_unless_used(db: Path) -> Iterator[Callable[[], None]]:
    """A database file this command creates is removed again (with its lock and journal files)
    when the command stops before it stored a run: an unreachable upstream or a file of bad
    lines leaves nothing behind. The context gives the function that marks the file used."""
    created = [path for path in _store_files(db) if not path.exists()]
    kept = False

    def used() -> None:
        nonlocal kept
        kept = True

    try:
        yield used
    except BaseException:
        if not kept and db in created:
            for path in created:
                path.unlink(missing_ok=True)
        raise


def _store_files(db: Path) -> list[Path]:
    """The SQLite file, its run lock and the journals SQLite may leave beside it."""
    return [db, *(db.with_name(db.name + suffix) for suffix in (".lock", "-journal", "-wal",
                                                                "-shm"))]


@contextmanager
def embedded_store(db: Path) -> Iterator[SessionFactory]:
    """The run lock and the SQLite store at ``db`` (created or upgraded)."""
    from app.runs.embedded import embedded_lock, sqlite_store

    try:
        with embedded_lock(db), sqlite_store(db) as factory:
            yield factory
    except OSError as exc:
        raise InputError(f"cannot use {str(db)!r}: {exc.strerror} ({exc.filename}); choose "
                         "a writable --database-url") from exc


def embedded_config(env: RunEnv, choice: UpstreamConfig, **given: Any) -> EmbeddedConfig:
    """The local executor's configuration: the options ``given`` (``chunk_size``, ``workers``,
    ``max_in_flight``) over ``DREADS_LEASE_S``, ``DREADS_MAX_ATTEMPTS``, ``DREADS_ANSWER_*``,
    ``DREADS_GPU_PRICE_HOUR``, reading with the engine ``choice``."""
    from app.runs.embedded import EmbeddedConfig
    from app.runs.settings import breaker_policy, endpoint_options, image_policy

    return EmbeddedConfig(lease_s=env.lease_s, max_attempts=env.max_attempts, engine=choice,
                          endpoints=endpoint_options(env), breaker=breaker_policy(env),
                          images=image_policy(env), gpu_price_hour=env.gpu_price_hour,
                          sim_joint_interference=env.sim_joint_interference, **given)


def resume_embedded(factory: SessionFactory, url: str, run: RunInfo, given: ReadGiven,
                    options: ResumeOptions, server: ServerAt,
                    env: RunEnv) -> ResumeReport | None:
    """``dreads resume`` on a SQLite store: the checks of every resume, then the run continues
    here, like ``dreads run``, under the run lock. Returns the report to print when there was
    nothing to run (None: it ran, and its summary is printed)."""
    from app.runs.embedded import embedded_lock
    from app.runs.resume import resume_run
    from app.store.urls import sqlite_path

    db_path = sqlite_path(url) or Path("dreads.db")
    source = Path(run.source) if run.source else None
    config = embedded_config(env, server.config)
    ran = False

    def proceed(info: RunInfo, report: ResumeReport) -> None:
        nonlocal ran
        for line in report.lines():
            console.print(line, highlight=False, markup=False)
        _execute(_Job(factory, db_path, info, server.url, source, config, check_server=False))
        ran = True

    with embedded_lock(db_path):
        report = resume_run(factory, run, given, options=options, server=server,
                            proceed=proceed)
    if not ran:
        return report
    _summary(factory, run.name, False, db_path)
    return None


def _execute(job: _Job) -> ExecutorStats:
    from app.engine import plans_reads, settings_from_dict
    from app.runs.embedded import ExecutorStats, reclaim_dead_leases, sim_key_path, start_upstream
    from app.runs.probe import ServerAt, check_server
    from app.runs.refusals import refuse_cancelled
    from app.store.db import session_scope
    from app.store.models import RunStatus
    from app.store.runs import require_run
    from app.tokenizer.hf import load_tokenizer

    refuse_cancelled(job.run)
    if job.run.status == RunStatus.PAUSED:
        job = _go_on_paused(job)
    reclaimed = reclaim_dead_leases(job.factory, job.run.id, max_attempts=job.config.max_attempts)
    if reclaimed and not job.quiet:
        err_console.print(f"{reclaimed} decision(s) left leased by an earlier, stopped run "
                          "are back to pending")
    if not _has_work(job):
        return ExecutorStats()
    settings = settings_from_dict(dict(job.run.settings))
    key = sim_key_path(job.job_file) if job.job_file else None
    by_endpoint = not plans_reads(settings.answer_by)
    if by_endpoint:  # nothing is read here: only a simulator answering the run is started
        url, sim = start_upstream(settings.answer_url, settings, key)
    else:
        url, sim = (job.upstream, None) if job.in_process else start_upstream(
            job.upstream, settings, key, joint_interference=job.config.sim_joint_interference)
    try:
        tokenizer = load_tokenizer(settings.tokenizer)
        note = None
        if job.check_server and not by_endpoint:
            note = check_server(job.factory, job.run, ServerAt(url, job.engine), settings,
                                force=False, tokenizer=tokenizer)
        with session_scope(job.factory) as session:
            simulator = require_run(session, job.run.name).simulator  # with its fingerprint
        if by_endpoint:
            _say_endpoint(job, settings, url, simulator=simulator)
        else:
            _say_upstream(job, url, simulator=simulator)
        _say_key_warnings(sim)
        if note and not job.quiet:
            err_console.print(note, highlight=False)
        return _drive(job, url, tokenizer)
    finally:
        if sim is not None:
            sim.stop()


def _go_on_paused(job: _Job) -> _Job:
    """Running a paused run's command again resumes it (as ``dreads resume`` does)."""

    from app.runs.budget import check_budget
    from app.store.breaker import unpause_run
    from app.store.db import session_scope
    from app.store.models import RunStatus

    with session_scope(job.factory) as session:
        check_budget(session, job.run.id, job.run.name)
        unpause_run(session, job.run.id)
    if not job.quiet:
        err_console.print(f"run {job.run.name} was paused ({job.run.pause_reason}); going on",
                          highlight=False, markup=False)
    run = replace(job.run, status=RunStatus.ACTIVE, pause_kind=None, pause_reason=None,
                  paused_at=None)
    return replace(job, run=run)


def _has_work(job: _Job) -> bool:
    from app.runs.embedded import claimable_ids
    from app.store.db import session_scope

    with session_scope(job.factory) as session:
        return bool(claimable_ids(session, job.run.id, max_attempts=job.config.max_attempts))


def _say_upstream(job: _Job, url: str, *, simulator: bool) -> None:
    """The run's opening line: who answers (``simulator``: the simulator, in this process or
    a ``dreads sim`` at the URL)."""
    from app.engine import SIM
    from app.runs.embedded import sim_key_path

    if job.quiet:
        return
    if job.in_process and job.engine is not None:
        err_console.print(f"engine: transformers in this process, model {url} on "
                          f"{job.engine.device} ({job.engine.dtype})", highlight=False)
        return
    if not simulator:
        err_console.print(f"upstream: {url}", highlight=False)
        return
    keyed = ""  # a dreads sim started apart answers with the key it was started with
    if job.upstream == SIM:
        key = sim_key_path(job.job_file) if job.job_file else None
        keyed = (f", with the answer key {escape(str(key))}" if key
                 else ", without an answer key (answers are noise)")
    err_console.print(f"[bold yellow]answers come from the SIMULATOR (dreads sim at {url})"
                      f"{keyed}; not from a model[/bold yellow]", highlight=False)


def _say_key_warnings(sim: Any) -> None:
    """What the simulator's answer key does not match in the job file, even with --json."""
    key = sim.app.answer_key if sim is not None else None
    for warning in key.warnings if key is not None else ():
        err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False,
                          soft_wrap=True)


def _say_endpoint(job: _Job, settings: ReadSettings, url: str, *, simulator: bool) -> None:
    if job.quiet:
        return
    from app.connect.plugins import find_source

    route = find_source(settings.answer_by).path
    if simulator:
        err_console.print(f"[bold yellow]answers come from the SIMULATOR's {route} (dreads sim "
                          f"at {url}), one request per decision; not from a model"
                          "[/bold yellow]", highlight=False)
        return
    err_console.print(f"answers come from the decision endpoint {url} ({route}, one request "
                      "per decision)", highlight=False)


def _rate(task: Any) -> Any:
    from rich.text import Text

    speed = task.finished_speed or task.speed
    return Text(f"{speed:.1f}/s" if speed else "-/s")


def _columns() -> tuple[Any, ...]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    class _RateColumn(ProgressColumn):
        def render(self, task: Any) -> Any:
            return _rate(task)

    return (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            _RateColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())


def _drive(job: _Job, url: str, tokenizer: Any) -> ExecutorStats:
    import asyncio

    from rich.progress import Progress

    from app.runs.embedded import execute_run, release_own_leases

    columns = _columns()
    with Progress(*columns, console=err_console, disable=job.quiet) as bar:
        task = bar.add_task(job.run.name, total=None)

        def progress(settled: int, total: int) -> None:
            bar.update(task, completed=settled, total=total)

        try:
            return asyncio.run(execute_run(job.factory, job.run, upstream_url=url,
                                           tokenizer=tokenizer, config=job.config,
                                           progress=progress))
        except UpstreamUnavailable as exc:
            raise UpstreamUnavailable(
                f"{exc.message}; start the model server there, pass --upstream URL, or try "
                "--upstream sim (the built-in simulator)", kind=exc.kind) from exc
        except RunPaused as exc:
            bar.stop()
            again = "with a higher --max-cost " if exc.budget else ""
            raise RunPaused(f"{exc.message} (running this same command again {again}also "
                            "resumes it)", budget=exc.budget) from exc
        except KeyboardInterrupt:
            bar.stop()
            released = release_own_leases(job.factory, job.run.id)
            err_console.print(f"[yellow]interrupted[/yellow] ({released} decision(s) in "
                              "progress put back to pending). Nothing is lost: run the same "
                              "command again (or `dreads resume`) to continue.")
            raise typer.Exit(EXIT_INTERRUPTED) from None


def _summary(factory: SessionFactory, name: str, json_out: bool, db: Path) -> None:
    from app.runs.embedded import draws_used
    from app.store.db import session_scope
    from app.store.runs import require_run
    from app.store.sources import source_files
    from app.store.views import run_status

    with session_scope(factory) as session:
        info = require_run(session, name)
        status = run_status(session, info)
        draws = draws_used(session, info.id)
        headline = _headline(session, info.id)
        sources = [path for _, path in source_files(session, name)]
    if json_out:
        doc = {**status.as_dict(), "draws": draws, "headline": headline}
        console.print_json(render.json_text(doc))
        return
    source = " (answers from the SIMULATOR)" if info.simulator else ""
    console.print(f"run {escape(repr(name))} in {escape(str(db))}{source}: "
                  f"{render.counts_text(status.counts)}",
                  highlight=False)
    console.print(render.cells_table(status))
    if status.reasons:
        console.print(render.reasons_table([r.as_dict() for r in status.reasons]))
    console.print(f"reads: {status.spend.total.reads:,} (requests to the model server); "
                  f"draws: {draws['draw_rows']:,} (a question read once), "
                  f"{draws['mean_draws_per_answer']:.2f} per answer on average", highlight=False)
    if headline and any((headline.get(t) or {}).get("n") for t in kind_names()):
        console.print(_headline_table(headline))
    else:
        console.print("no expected labels in this run: no evaluation figures")
    console.print(render.next_steps(name, db, sources), highlight=False, markup=False,
                  soft_wrap=True)


def _headline(session: Session, run_id: int) -> dict[str, Any] | None:
    from app.report.document import summarize_run

    return summarize_run(session, run_id)


def _headline_table(headline: dict[str, Any]) -> Table:
    from app.report.tables import headline_table

    return headline_table(headline["headline"],
                          "headline figures (questions with expected labels)")
