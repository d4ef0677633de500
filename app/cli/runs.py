"""``dreads submit``, ``runs``, ``status``, ``resume``, ``cancel``, ``export``.

Each command parses options, calls an importable function (``app.producer``,
``app.store.runs``), prints, and exits with a code: 0 ok, 1 failure, 2 a user error.
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import IO, Annotated, Any

import orjson
import typer
from rich.live import Live
from sqlalchemy.orm import Session, sessionmaker

from app.cli import _render as render
from app.cli._app import app
from app.cli._wiring import (
    existing_run,
    make_publisher,
    make_sender,
    resolve_engine,
    resolve_settings,
    run_upstream,
    sweep_for,
)
from app.cli.engine import DeviceOpt, DtypeOpt, EngineOpt
from app.cli.options import (
    AnswerByOpt,
    AnswerConcurrencyOpt,
    AnswerRpsOpt,
    AnswerUrlOpt,
    BrokerOpt,
    CanvasOpt,
    CanvasStepOpt,
    ChunkSizeOpt,
    ConstrainedOpt,
    DatabaseOpt,
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
    UpstreamOpt,
    cli_errors,
    console,
    database_url,
    err_console,
    opened_store,
    read_overrides,
)
from app.cli.run import resume_embedded
from app.config import get_settings
from app.embedded import load_run
from app.engine import AnswerBy, ReadSettings, settings_to_dict
from app.producer import (
    SubmitRequest,
    check_resume_settings,
    check_server,
    fetch_fingerprint,
    resume_run,
    submit_job,
)
from app.store.db import session_scope
from app.store.runs import RunInfo, cancel_run, record_settings, require_run
from app.store.views import ANSWER_FIELDS, iter_export, list_runs, question_ids, run_status
from workers.constants import queue_of_run

__all__ = ["cancel", "export", "resume", "runs", "status", "submit"]

RunArg = Annotated[str, typer.Argument(help="Run name.")]


@app.command()
def submit(
    file: Annotated[Path, typer.Argument(help="Job file (JSONL, one decision per line).")],
    run: Annotated[str, typer.Option("--run", help="Run name (new or existing).")],
    model: ModelOpt = None, tokenizer: TokenizerOpt = None, canvas: CanvasOpt = None,
    canvas_step: CanvasStepOpt = None, layout: LayoutOpt = None, mode: ModeOpt = None,
    policy: PolicyOpt = None, draws: DrawsOpt = None, threshold: ThresholdOpt = None,
    max_draws: MaxDrawsOpt = None, steps: StepsOpt = None, constrained: ConstrainedOpt = None,
    endpoint: EndpointOpt = None, seed: SeedOpt = None,
    answer_by: AnswerByOpt = None, answer_url: AnswerUrlOpt = None,
    answer_rps: AnswerRpsOpt = None, answer_concurrency: AnswerConcurrencyOpt = None,
    replicates: Annotated[int | None, typer.Option(
        "--replicates", min=1, help="Copies of each decision with different noise (1).")] = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Refuse the whole file (write nothing) if any line is bad.")] = False,
    upstream: UpstreamOpt = None, chunk_size: ChunkSizeOpt = None,
    broker: BrokerOpt = None,
    json_out: JsonOpt = False, database: DatabaseOpt = None,
    engine: EngineOpt = None, device: DeviceOpt = None, dtype: DtypeOpt = None,
) -> None:
    """Validate a job file, store its decisions and queue them for the workers."""
    given = read_overrides(model=model, tokenizer=tokenizer, canvas=canvas,
                           canvas_step=canvas_step, layout=layout, mode=mode, policy=policy,
                           draws=draws, threshold=threshold, max_draws=max_draws, steps=steps,
                           constrained=constrained, endpoint=endpoint, seed=seed,
                           answer_by=answer_by, answer_url=answer_url, answer_rps=answer_rps,
                           answer_concurrency=answer_concurrency)
    with cli_errors(), opened_store(database_url(database)) as factory:
        existing = existing_run(factory, run)
        choice = resolve_engine(existing, engine=engine, device=device, dtype=dtype)
        settings, n_replicates, tok = resolve_settings(existing, given, replicates,
                                                       engine=choice.engine, upstream=upstream)
        url = run_upstream(upstream, existing, choice, settings)
        fingerprint, fp_error = (None, None) if settings.answer_by is not AnswerBy.READS \
            else fetch_fingerprint(url, settings, engine=choice, tokenizer=tok)
        request = SubmitRequest(path=file, run_name=run, settings=settings, upstream=url,
                                engine=choice.engine, replicates=n_replicates,
                                strict=strict, fingerprint=fingerprint)
        with make_sender(broker) as sender:
            publisher = make_publisher(sender, chunk_size, run_name=run,
                                       queue=queue_of_run(settings_to_dict(settings)))
            report = submit_job(request, factory, tok, publisher=publisher)
    if json_out:
        console.print_json(orjson.dumps({**report.as_dict(), "fingerprint_error": fp_error})
                           .decode())
    else:
        render.submit_report(report, fp_error)
    if report.refused:
        raise typer.Exit(2)


@app.command()
def runs(json_out: JsonOpt = False, database: DatabaseOpt = None) -> None:
    """List the runs with their settings and decision counts by status."""
    with cli_errors(), _session(database) as session:
        overview = list_runs(session)
    if json_out:
        console.print_json(orjson.dumps([o.as_dict() for o in overview]).decode())
    else:
        console.print(render.runs_table(overview))


@app.command()
def status(
    run: RunArg,
    json_out: JsonOpt = False,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until done (Ctrl-C stops).")]
    = False,
    interval_s: Annotated[float, typer.Option("--interval", min=0.2, help="Watch period (s).")]
    = 2.0,
    database: DatabaseOpt = None,
) -> None:
    """Counts by status, per-cell unanswered / failures / diagnostics, rate and ETA (SQL only)."""
    with cli_errors(), opened_store(database_url(database)) as factory:
        report = _status(factory, run)
        if json_out:
            console.print_json(orjson.dumps(report.as_dict()).decode())
        elif watch:
            _watch(factory, run, interval_s)
        else:
            console.print(render.status_view(report))


def _status(factory: sessionmaker[Session], name: str) -> Any:
    with session_scope(factory) as session:
        return run_status(session, require_run(session, name))


def _watch(factory: sessionmaker[Session], name: str, interval_s: float) -> None:
    report = _status(factory, name)
    try:
        with Live(render.status_view(report), console=console, auto_refresh=False) as live:
            while report.remaining > 0:
                time.sleep(interval_s)
                report = _status(factory, name)
                live.update(render.status_view(report), refresh=True)
    except KeyboardInterrupt:
        err_console.print("stopped watching; the run goes on")


@app.command()
def resume(
    run: RunArg,
    retry_failed: Annotated[bool, typer.Option(
        "--retry-failed", help="Put failed decisions back to pending first.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be done.")]
    = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Continue against a server whose model or canvas differs.")] = False,
    model: ModelOpt = None, tokenizer: TokenizerOpt = None, canvas: CanvasOpt = None,
    canvas_step: CanvasStepOpt = None, layout: LayoutOpt = None, mode: ModeOpt = None,
    policy: PolicyOpt = None, draws: DrawsOpt = None, threshold: ThresholdOpt = None,
    max_draws: MaxDrawsOpt = None, steps: StepsOpt = None, constrained: ConstrainedOpt = None,
    endpoint: EndpointOpt = None, seed: SeedOpt = None,
    answer_by: AnswerByOpt = None, answer_url: AnswerUrlOpt = None,
    answer_rps: AnswerRpsOpt = None, answer_concurrency: AnswerConcurrencyOpt = None,
    upstream: UpstreamOpt = None, chunk_size: ChunkSizeOpt = None,
    broker: BrokerOpt = None,
    json_out: JsonOpt = False, database: DatabaseOpt = None,
    engine: EngineOpt = None, device: DeviceOpt = None, dtype: DtypeOpt = None,
) -> None:
    """Continue a run: check settings and server, sweep, (retry failed,) publish what is left.

    On a SQLite store (the embedded mode) the decisions are run here, in this process.
    """
    given = read_overrides(model=model, tokenizer=tokenizer, canvas=canvas,
                           canvas_step=canvas_step, layout=layout, mode=mode, policy=policy,
                           draws=draws, threshold=threshold, max_draws=max_draws, steps=steps,
                           constrained=constrained, endpoint=endpoint, seed=seed,
                           answer_by=answer_by, answer_url=answer_url, answer_rps=answer_rps,
                           answer_concurrency=answer_concurrency)
    from app.upstream.tokenizer import load_tokenizer

    url = database_url(database)
    with cli_errors(), opened_store(url) as factory:
        info = load_run(factory, run)
        settings = check_resume_settings(info, given)
        info = _take_budget(factory, info, settings)
        choice = resolve_engine(info, engine=engine, device=device, dtype=dtype)
        note = None if settings.answer_by is not AnswerBy.READS else check_server(
            factory, info, _resume_upstream(upstream, info), settings, force=force,
            engine=choice, tokenizer=load_tokenizer(settings.tokenizer))
        if url.startswith("sqlite") and not dry_run:
            resume_embedded(factory, url, info, retry_failed=retry_failed, note=note,
                            upstream=upstream, engine=choice)
            return
        with make_sender(broker) as sender:
            report = resume_run(factory, info,
                                sweep=sweep_for(factory, sender, info.id, chunk_size),
                                retry_failed=retry_failed, dry_run=dry_run,
                                requeue_after_s=get_settings().requeue_after_s)
        report.server_note = note
    if json_out:
        console.print_json(orjson.dumps(report.as_dict()).decode())
    else:
        render.resume_report(report)


def _take_budget(factory: sessionmaker[Session], info: RunInfo,
                 settings: ReadSettings) -> RunInfo:
    """The run with the endpoint budget given to resume (the only change resume takes)."""
    wanted = settings_to_dict(settings)
    if wanted == dict(info.settings):
        return info
    with session_scope(factory) as session:
        record_settings(session, info.id, wanted)
        return require_run(session, info.name)


def _resume_upstream(given: str | None, info: RunInfo) -> str:
    """The upstream whose fingerprint is checked: the given one, else the run's."""
    return given or info.upstream


@app.command()
def cancel(run: RunArg, database: DatabaseOpt = None) -> None:
    """Cancel a run: workers skip it and its unfinished decisions become cancelled."""
    with cli_errors(), _session(database) as session:
        info = require_run(session, run)
        n = cancel_run(session, info.id)
    console.print(f"run {run!r} cancelled; {n} unfinished decision(s) marked cancelled",
                  highlight=False)


class ExportFormat(StrEnum):
    JSONL = "jsonl"
    CSV = "csv"
    OPENAI_BATCH = "openai-batch"


@app.command()
def export(
    run: RunArg,
    fmt: Annotated[ExportFormat, typer.Option(
        "--format", help="jsonl, csv, or openai-batch (OpenAI's Batch output lines, each "
        "body a Decision with dreads' diagnostics).")]
    = ExportFormat.JSONL,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="File (default stdout).")]
    = None,
    database: DatabaseOpt = None,
) -> None:
    """One line per decision with every answer and diagnostic (streamed from SQL)."""
    with cli_errors(), _session(database) as session, _open_out(output) as out:
        info = require_run(session, run)
        if fmt is ExportFormat.JSONL:
            n = _write_jsonl(out, iter_export(session, info.id))
        elif fmt is ExportFormat.OPENAI_BATCH:
            from app.store.openai_export import iter_openai_batch

            model = str(info.settings.get("model", ""))
            n = _write_jsonl(out, iter_openai_batch(session, info.id, model))
        else:
            n = _write_csv(out, question_ids(session, info.id), iter_export(session, info.id))
    if output is not None:
        err_console.print(f"exported {n} decision(s) of run {run!r} to {output}",
                          highlight=False)


@contextmanager
def _session(database: str | None) -> Iterator[Session]:
    with opened_store(database_url(database)) as factory, session_scope(factory) as session:
        yield session


@contextmanager
def _open_out(output: Path | None) -> Iterator[IO[str]]:
    if output is None:
        yield sys.stdout
        return
    with output.open("w", encoding="utf-8", newline="") as handle:
        yield handle


def _write_jsonl(out: IO[str], records: Iterator[dict[str, Any]]) -> int:
    n = 0
    for record in records:
        out.write(orjson.dumps(record).decode() + "\n")
        n += 1
    return n


def _csv_columns(qids: list[str]) -> list[str]:
    per_question = [*ANSWER_FIELDS, "expected"]
    return ["id", "cell", "replicate", "status", "error_kind", "error",
            *(f"{qid}.{name}" for qid in qids for name in per_question)]


def _csv_row(record: dict[str, Any]) -> dict[str, Any]:
    row = {k: record[k] for k in ("id", "cell", "replicate", "status", "error_kind", "error")}
    for qid, answer in record["answers"].items():
        for name, value in answer.items():
            if name == "probs" and value is not None:
                value = orjson.dumps(value).decode()
            if name != "answered":
                row[f"{qid}.{name}"] = value
    return row


def _write_csv(out: IO[str], qids: list[str], records: Iterator[dict[str, Any]]) -> int:
    writer = csv.DictWriter(out, fieldnames=_csv_columns(qids), extrasaction="ignore")
    writer.writeheader()
    n = 0
    for record in records:
        writer.writerow(_csv_row(record))
        n += 1
    return n
