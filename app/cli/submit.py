"""``dreads submit``: a job file into a run, queued for the workers."""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

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
    BrokerOpt,
    ChunkSizeOpt,
    DatabaseOpt,
    FailOnBadLinesOpt,
    ImageDirsOpt,
    JobFileArg,
    JsonOpt,
    ReadGiven,
    ReplaceChangedOpt,
    ReplicatesOpt,
    RunWaitOpt,
    UpstreamOpt,
    cli_errors,
    console,
    database_url,
    opened_store,
    with_read_options,
)
from app.errors import EXIT_USAGE

if TYPE_CHECKING:
    from app.runs.env import RunEnv
    from app.runs.submission import Resolved
    from app.runs.submit import SubmitRequest
    from app.store.records import RunInfo

log = logging.getLogger("dreads.cli")


__all__ = ["submit"]


@app.command(rich_help_panel=RUN_JOBS)
@with_read_options(answers=True)
def submit(
    file: JobFileArg,
    run: Annotated[str, typer.Option("--run", help="Run name (new or existing).")],
    given: ReadGiven = NOT_GIVEN,
    replicates: ReplicatesOpt = None,
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
    from app.engine.limits import check_run_name
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
        check_run_name(run)
        # started first: its Celery start-up overlaps the tokenizer's and the probe's
        with PublisherProcess(broker, chunk_size) as publisher, \
                opened_store(database_url(database)) as factory:
            from app.config import run_env, settings_with
            from app.runs.settings import image_policy
            from app.runs.sources import recorded_path
            from app.runs.submission import Submission, submit_run

            env = run_env(settings_with(image_dirs=image_dirs))
            options = ReadChoice(given, upstream, wait, engine, device, dtype)
            submission = Submission(file, run, replicates, strict, replace_changed,
                                    image_policy(env), spend.recorded(), (recorded_path(file),))
            submitted = submit_run(factory, submission,
                                   lambda existing: _resolve(existing, options, env),
                                   publisher_for=lambda request: _bound(publisher, request))
    report, fp_error = submitted.report, submitted.resolved.fingerprint_error
    if json_out:
        console.print_json(render.json_text({**report.as_dict(),
                                             "fingerprint_error": fp_error}))
    else:
        render.submit_report(report, fp_error)
    render.changed_report(report, replace_changed=replace_changed)  # stderr
    if report.refused or report.run is None:
        raise typer.Exit(EXIT_USAGE)
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


def _resolve(existing: RunInfo | None, options: ReadChoice, env: RunEnv) -> Resolved:
    """``resolve_run``, with the fingerprint of the server that reads the run (none for a run
    answered by a decision endpoint)."""
    from app.engine import plans_reads
    from app.runs.probe import ServerAt

    resolved = resolve_run(existing, options, env=env)
    settings = resolved.settings
    fingerprint, fp_error = (None, None) if not plans_reads(settings.answer_by) \
        else ServerAt(resolved.upstream, resolved.engine).fingerprint(settings,
                                                                        resolved.tokenizer)
    return replace(resolved, fingerprint=fingerprint, fingerprint_error=fp_error)


def _bound(publisher: Any, request: SubmitRequest) -> Any:
    """``publisher`` (an ``app.broker.process.PublisherProcess``) sending to the queue of the
    run's model and canvas; the streaming runtime from here on."""
    from app.broker.names import queue_of_run
    from app.engine import settings_to_dict

    _streaming_runtime()
    publisher.bind(run_name=request.run_name,
                   queue=queue_of_run(settings_to_dict(request.settings)))
    return publisher
