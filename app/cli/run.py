"""``dreads run FILE``: the one-command embedded mode (SQLite, in-process executor, no Redis).

Run it again after Ctrl-C or a kill and it continues where it stopped.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text
from sqlalchemy import make_url
from sqlalchemy.orm import Session, sessionmaker

from app.cli import _render as render
from app.cli._app import app
from app.cli._wiring import existing_run, resolve_engine, resolve_settings, run_upstream
from app.cli.engine import DeviceOpt, DtypeOpt, EngineOpt
from app.cli.options import (
    AnswerByOpt,
    AnswerConcurrencyOpt,
    AnswerRpsOpt,
    AnswerUrlOpt,
    CanvasOpt,
    CanvasStepOpt,
    ChunkSizeOpt,
    ConstrainedOpt,
    DrawsOpt,
    EndpointOpt,
    JsonOpt,
    LayoutOpt,
    MaxDrawsOpt,
    ModelOpt,
    ModeOpt,
    PolicyOpt,
    SeedOpt,
    StepsOpt,
    ThresholdOpt,
    TokenizerOpt,
    cli_errors,
    console,
    err_console,
    read_overrides,
)
from app.config import get_settings
from app.embedded import (
    SIM,
    EmbeddedConfig,
    ExecutorStats,
    claimable_ids,
    draws_used,
    embedded_lock,
    execute_run,
    load_run,
    reclaim_dead_leases,
    release_own_leases,
    sim_key_path,
    sqlite_store,
    start_upstream,
)
from app.engine import AnswerBy, ReadSettings, settings_from_dict
from app.errors import InputError, UpstreamUnavailable
from app.producer import SubmitRequest, check_server, submit_job
from app.store.db import session_scope
from app.store.models import RunStatus
from app.store.runs import RunInfo, require_run, reset_failed
from app.store.views import run_status
from app.upstream.factory import UpstreamConfig
from app.upstream.tokenizer import load_tokenizer

__all__ = ["resume_embedded", "run"]

_TYPES = ("noul", "choice", "score")


@dataclass(frozen=True)
class _Job:
    """One embedded execution: where, what, against which upstream."""

    factory: sessionmaker[Session]
    db_path: Path
    run: RunInfo
    upstream: str  #: "sim" or a URL (the model for the transformers engine)
    job_file: Path | None
    config: EmbeddedConfig
    quiet: bool = False
    check_server: bool = True  #: compare/record the server fingerprint (resume did already)
    engine: UpstreamConfig | None = None  #: the engine choice (None: DREADS_*)

    @property
    def in_process(self) -> bool:
        """Reads answered by the transformers engine in this process (no server)."""
        return self.engine is not None and self.engine.engine == "transformers"


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="Job file (JSONL, one decision per line).",
                                         exists=True, dir_okay=False, readable=True)],
    upstream: Annotated[str | None, typer.Option(
        "--upstream", help="vLLM URL, or 'sim' for the built-in simulator (default: the "
        "run's own, else DREADS_UPSTREAM).")] = None,
    db: Annotated[Path, typer.Option("--db", help="SQLite file (created if missing).")]
    = Path("dreads.db"),
    run_name: Annotated[str | None, typer.Option(
        "--run", help="Run name (default: the file name without extension).")] = None,
    model: ModelOpt = None, tokenizer: TokenizerOpt = None, canvas: CanvasOpt = None,
    canvas_step: CanvasStepOpt = None, layout: LayoutOpt = None, mode: ModeOpt = None,
    policy: PolicyOpt = None, draws: DrawsOpt = None, threshold: ThresholdOpt = None,
    max_draws: MaxDrawsOpt = None, steps: StepsOpt = None, constrained: ConstrainedOpt = None,
    endpoint: EndpointOpt = None, seed: SeedOpt = None,
    answer_by: AnswerByOpt = None, answer_url: AnswerUrlOpt = None,
    answer_rps: AnswerRpsOpt = None, answer_concurrency: AnswerConcurrencyOpt = None,
    replicates: Annotated[int | None, typer.Option(
        "--replicates", min=1, help="Copies of each decision with different noise (1).")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Refuse the file if a line is bad.")]
    = False,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Chunks run at once.")] = 4,
    concurrency: Annotated[int, typer.Option(
        "--concurrency", min=1, help="Reads in flight, all chunks together.")] = 64,
    chunk_size: ChunkSizeOpt = None,
    json_out: JsonOpt = False,
    engine: EngineOpt = None, device: DeviceOpt = None, dtype: DtypeOpt = None,
) -> None:
    """Run a job file start to finish in this process: SQLite store, no Redis, no worker."""
    given = read_overrides(model=model, tokenizer=tokenizer, canvas=canvas,
                           canvas_step=canvas_step, layout=layout, mode=mode, policy=policy,
                           draws=draws, threshold=threshold, max_draws=max_draws, steps=steps,
                           constrained=constrained, endpoint=endpoint, seed=seed,
                           answer_by=answer_by, answer_url=answer_url, answer_rps=answer_rps,
                           answer_concurrency=answer_concurrency)
    name = run_name or file.stem
    config = _config(workers, concurrency, chunk_size)
    with cli_errors(), embedded_lock(db), sqlite_store(db) as factory:
        existing = existing_run(factory, name)
        choice = resolve_engine(existing, engine=engine, device=device, dtype=dtype)
        settings, n_rep, tok = resolve_settings(existing, given, replicates,
                                                engine=choice.engine, upstream=upstream)
        target = run_upstream(upstream, existing, choice, settings)
        request = SubmitRequest(path=file, run_name=name, settings=settings, upstream=target,
                                engine=choice.engine, replicates=n_rep, strict=strict)
        report = submit_job(request, factory, tok)
        if not json_out or report.refused:
            render.submit_report(report, None, queued=False)
        if report.refused:
            raise typer.Exit(2)
        job = _Job(factory, db, load_run(factory, name), target, file, config, quiet=json_out,
                   engine=choice)
        _execute(job)
        _summary(factory, name, json_out)


def _config(workers: int, concurrency: int, chunk_size: int | None) -> EmbeddedConfig:
    env = get_settings()
    return EmbeddedConfig(chunk_size=chunk_size or 16, workers=workers,
                          max_in_flight=concurrency, lease_s=env.lease_s,
                          max_attempts=env.max_attempts)


def resume_embedded(factory: sessionmaker[Session], url: str, run: RunInfo, *,
                    retry_failed: bool, note: str | None, upstream: str | None = None,
                    engine: UpstreamConfig | None = None) -> None:
    """``dreads resume`` on a SQLite store: continue the run here, like ``dreads run``."""
    db_path = Path(make_url(url).database or "dreads.db")
    source = Path(run.source) if run.source else None
    with embedded_lock(db_path):
        if note:
            console.print(note, highlight=False)
        if retry_failed:
            with session_scope(factory) as session:
                n = reset_failed(session, run.id)
            console.print(f"{n} failed decision(s) put back to pending")
        env = get_settings()
        config = EmbeddedConfig(lease_s=env.lease_s, max_attempts=env.max_attempts)
        _execute(_Job(factory, db_path, run, upstream or run.upstream, source, config,
                      check_server=False, engine=engine))
    _summary(factory, run.name, False)


def _execute(job: _Job) -> ExecutorStats:
    if job.run.status == RunStatus.CANCELLED:
        raise InputError(f"run {job.run.name!r} was cancelled; run the file under a new --run "
                         "name to run it again")
    reclaimed = reclaim_dead_leases(job.factory, job.run.id, max_attempts=job.config.max_attempts)
    if reclaimed and not job.quiet:
        err_console.print(f"{reclaimed} decision(s) left leased by an earlier, stopped run "
                          "are back to pending")
    if not _has_work(job):
        return ExecutorStats()
    settings = settings_from_dict(dict(job.run.settings))
    key = sim_key_path(job.job_file) if job.job_file else None
    by_endpoint = settings.answer_by is not AnswerBy.READS
    if by_endpoint:  # nothing is read here: only a simulator answering the run is started
        url, sim = start_upstream(settings.answer_url, settings, key)
    else:
        url, sim = (job.upstream, None) if job.in_process else start_upstream(
            job.upstream, settings, key)
    try:
        if by_endpoint:
            _say_endpoint(job, settings, url)
        else:
            _say_upstream(job, url)
        tokenizer = load_tokenizer(settings.tokenizer)
        if job.check_server and not by_endpoint:
            note = check_server(job.factory, job.run, url, settings, force=False,
                                engine=job.engine, tokenizer=tokenizer)
            if note and not job.quiet:
                err_console.print(note, highlight=False)
        return _drive(job, url, tokenizer)
    finally:
        if sim is not None:
            sim.stop()


def _has_work(job: _Job) -> bool:
    with session_scope(job.factory) as session:
        return bool(claimable_ids(session, job.run.id, max_attempts=job.config.max_attempts))


def _say_upstream(job: _Job, url: str) -> None:
    if job.quiet:
        return
    if job.in_process and job.engine is not None:
        err_console.print(f"engine: transformers in this process, model {url} on "
                          f"{job.engine.device} ({job.engine.dtype})", highlight=False)
        return
    if job.upstream != SIM:
        err_console.print(f"upstream: {url}", highlight=False)
        return
    key = sim_key_path(job.job_file) if job.job_file else None
    keyed = f"with the answer key {key}" if key else "without an answer key (answers are noise)"
    err_console.print(f"[bold yellow]answers come from the SIMULATOR (dreads sim at {url}), "
                      f"{keyed}; not from a model[/bold yellow]", highlight=False)


def _say_endpoint(job: _Job, settings: ReadSettings, url: str) -> None:
    if job.quiet:
        return
    route = f"/v1/{settings.answer_by.value}"
    if settings.answer_url == SIM:
        err_console.print(f"[bold yellow]answers come from the SIMULATOR's {route} (dreads sim "
                          f"at {url}), one request per decision; not from a model"
                          "[/bold yellow]", highlight=False)
        return
    err_console.print(f"answers come from the decision endpoint {url} ({route}, one request "
                      "per decision)", highlight=False)


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:.1f}/s" if speed else "-/s")


def _drive(job: _Job, url: str, tokenizer: Any) -> ExecutorStats:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               _RateColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=err_console, disable=job.quiet) as bar:
        task = bar.add_task(job.run.name, total=None)

        def progress(settled: int, total: int) -> None:
            bar.update(task, completed=settled, total=total)

        try:
            return asyncio.run(execute_run(job.factory, job.run, upstream_url=url,
                                           tokenizer=tokenizer, config=job.config,
                                           progress=progress, engine=job.engine))
        except UpstreamUnavailable as exc:
            raise UpstreamUnavailable(
                f"{exc.message}; start the model server there, pass --upstream URL, or try "
                "--upstream sim (the built-in simulator)", kind=exc.kind) from exc
        except KeyboardInterrupt:
            bar.stop()
            released = release_own_leases(job.factory, job.run.id)
            err_console.print(f"[yellow]interrupted[/yellow] ({released} decision(s) in "
                              "progress put back to pending). Nothing is lost: run the same "
                              "command again (or `dreads resume`) to continue.")
            raise typer.Exit(130) from None


def _summary(factory: sessionmaker[Session], name: str, json_out: bool) -> None:
    with session_scope(factory) as session:
        info = require_run(session, name)
        status = run_status(session, info)
        draws = draws_used(session, info.id)
        headline = _headline(session, info.id)
    if json_out:
        doc = {**status.as_dict(), "draws": draws, "headline": headline}
        console.print_json(orjson.dumps(doc).decode())
        return
    source = " (answers from the SIMULATOR)" if info.upstream == SIM else ""
    console.print(f"run {name!r} in SQLite{source}: {render.counts_text(status.counts)}",
                  highlight=False)
    console.print(render.cells_table(status))
    console.print(f"reads: {draws['draw_rows']} draw row(s), "
                  f"{draws['mean_draws_per_answer']:.2f} draws per answer on average")
    if headline and any((headline.get(t) or {}).get("n") for t in _TYPES):
        console.print(_headline_table(headline))
    else:
        console.print("no expected labels in this run: no evaluation figures")


def _headline(session: Session, run_id: int) -> dict[str, Any] | None:
    from app.report.document import summarize_run

    return summarize_run(session, run_id)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _headline_table(headline: dict[str, Any]) -> Table:
    table = Table(title="headline figures (questions with expected labels)",
                  title_justify="left")
    table.add_column("type")
    table.add_column("figures", overflow="fold")
    for qtype in _TYPES:
        figures = headline.get(qtype) or {}
        if figures.get("n"):
            table.add_row(qtype, ", ".join(f"{k} {_fmt(v)}" for k, v in figures.items()))
    return table
