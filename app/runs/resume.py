"""Resume: continue a run where it stopped, under its own settings, on its own server.

One function for every caller (``dreads resume``, ``POST /v1/runs/{run}/resume`` and both of
the API's executors), so each refuses exactly the same things with the same words:

    resume_run
      1. a cancelled run never runs again                       RunCancelled
      2. the settings given must be the run's own (an endpoint budget may change)
                                                                RunSettingsMismatch
      3. the new budget is written on the run, and the prices and spend budget given
         (``--price-*``, ``--max-cost``)
      4. a settled run: nothing to do (no server asked)
      5. the server must serve the run's model and canvas       RunSettingsMismatch
         (``app.runs.probe.check_server``; ``force`` overrides)
      6. a paused run goes on: the breaker closes, its count starts over; a run whose
         recorded cost is at or past its spend budget does not    BudgetReached
      7. failed decisions back to pending (``retry_failed``)
      8. ``proceed``: a sweep publishes what is left (the distributed mode), or the embedded
         executor runs it here

``dry_run`` stops after the checks and says what would be done.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.engine import ReadSettings, plans_reads, settings_from_dict, settings_to_dict
from app.engine.settings_hash import changed_settings
from app.errors import RunSettingsMismatch
from app.runs.budget import check_budget
from app.runs.probe import ProbeTokenizer, Server, check_server
from app.runs.refusals import refuse_cancelled
from app.runs.reports import ResumeReport, SweepReport, settled_report
from app.store.breaker import unpause_run
from app.store.db import session_scope
from app.store.models import RunStatus
from app.store.records import RunInfo
from app.store.runs import record_settings, require_run, reset_failed
from app.store.spend import set_prices
from app.store.types import SessionFactory
from app.store.views import is_settled, resume_preview

__all__ = ["Proceed", "ResumeOptions", "check_resume_settings", "resume_run"]

#: What continues a run once every check passed, given the run and the report so far: a sweep
#: that publishes what is left (its report), or the embedded executor (None).
Proceed = Callable[[RunInfo, ResumeReport], SweepReport | None]


@dataclass(frozen=True)
class ResumeOptions:
    retry_failed: bool = False  #: put failed decisions back to pending first
    dry_run: bool = False  #: only say what would be done
    force: bool = False  #: continue against a server whose model or canvas differs
    requeue_after_s: float = 60.0  #: a queued decision this old counts as without a message
    #: token prices and spend budget to record (``app.store.spend.PRICE_COLUMNS``; None:
    #: left as the run has them)
    prices: Mapping[str, float | None] = field(default_factory=dict)


def check_resume_settings(run: RunInfo, given: Mapping[str, Any]) -> ReadSettings:
    """The run's settings with ``given`` (read settings by field name) on top; only an
    endpoint budget may differ from the run's own.

    Raises:
        RunCancelled: the run was cancelled.
        RunSettingsMismatch: a setting other than the budget differs.
    """
    refuse_cancelled(run)
    current = settings_from_dict(dict(run.settings))
    wanted = replace(current, **given)
    changes = [c for c in changed_settings(settings_to_dict(current), settings_to_dict(wanted))
               if not c.is_budget]
    if changes:
        raise RunSettingsMismatch(
            run=run.name, changes=changes, situation="was created with other settings",
            advice="a run continues only under its own settings: leave these settings out, "
            "or submit the file under a new run name")
    return wanted


def resume_run(factory: SessionFactory, run: RunInfo, given: Mapping[str, Any], *,
               options: ResumeOptions, server: Server, proceed: Proceed,
               tokenizer: ProbeTokenizer | None = None) -> ResumeReport:
    """Continue ``run`` (steps in the module's docstring). ``server`` is where its reads would
    go; ``tokenizer`` (default: the run's, loaded once the server answers) builds the probe
    read at the run's canvas width. Idempotent: a settled run publishes nothing.

    Raises:
        RunCancelled, RunSettingsMismatch: the run cannot go on as asked.
        BudgetReached: the run paused with its recorded cost at or past its budget.
        ConfigError: the server refuses the key, or a read at the run's canvas width.
    """
    settings = check_resume_settings(run, given)
    if not options.dry_run:
        run = _take_budget(factory, run, settings)
        with session_scope(factory) as session:
            set_prices(session, run.id, options.prices)
    with session_scope(factory) as session:
        settled = is_settled(session, run.id, count_failed=options.retry_failed)
    if settled:
        return settled_report(run.name, options.dry_run)
    note = None
    if plans_reads(settings.answer_by):
        note = check_server(factory, run, server, settings, force=options.force,
                            tokenizer=tokenizer or _run_tokenizer(settings),
                            dry_run=options.dry_run)
    with session_scope(factory) as session:
        before = resume_preview(session, run.id, requeue_after_s=options.requeue_after_s)
    report = ResumeReport(run=run.name, dry_run=options.dry_run, before=before,
                          server_note=note)
    if options.dry_run:
        return report
    if run.status == RunStatus.PAUSED:
        run = _unpause(factory, run, report)
    if options.retry_failed:
        with session_scope(factory) as session:
            report.retried = reset_failed(session, run.id)
    report.sweep = proceed(run, report)
    return report


def _unpause(factory: SessionFactory, run: RunInfo, report: ResumeReport) -> RunInfo:
    """Close the breaker of a paused run: it is active again (the report says why it had
    paused)."""
    with session_scope(factory) as session:
        check_budget(session, run.id, run.name)
        if unpause_run(session, run.id):
            report.unpaused = run.pause_reason or "paused"
    return replace(run, status=RunStatus.ACTIVE, pause_kind=None, pause_reason=None,
                   paused_at=None)


def _run_tokenizer(settings: ReadSettings) -> ProbeTokenizer:
    def load() -> Any:
        from app.tokenizer.hf import load_tokenizer

        return load_tokenizer(settings.tokenizer)

    return load


def _take_budget(factory: SessionFactory, run: RunInfo, settings: ReadSettings) -> RunInfo:
    """The run with the endpoint budget given to resume (the only change resume takes)."""
    wanted = settings_to_dict(settings)
    if wanted == dict(run.settings):
        return run
    with session_scope(factory) as session:
        record_settings(session, run.id, wanted)
        return require_run(session, run.name)
