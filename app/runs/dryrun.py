"""``submit --dry-run`` and ``run --dry-run``: what a job file would read and cost.

The file is read and validated line by line as ``submit_job`` reads it (the same bad lines,
with the same reasons; an id repeated anywhere in the file is a bad line), and every decision
is planned with the run's tokenizer and settings, as a worker plans it. A decision the template
cannot read is counted as rejected, with the reason a submit stores. Nothing is written and
nothing is published: this module opens no database and no broker, and keeps only counts (and
the ids seen, to find repeated ones), so a file of a million lines streams through.

    lines --iter_job_lines--> decisions | bad lines --plan_decision--> ReadTally --> Estimate

A run answered by a decision endpoint (``--answer-by systemone|decisions``, or a plugin's)
sends one request per decision; the endpoint plans its own reads. Its input tokens are
estimated as vLLM's reader plans them (the ``vllm`` layout, one read per question, one draw)
with the run's tokenizer, on the decision as its source says the reader sees it (the
source's ``asked``): exact for vLLM's own reader serving that tokenizer, an estimate for any
other endpoint.

A decision's images are fetched and checked as submit does (each image once), so that their
prompt tokens are counted, and a decision whose image cannot be used is counted as rejected.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.connect.plugins import find_source
from app.engine import (
    Decision,
    Endpoint,
    Estimate,
    Layout,
    PolicyName,
    Prices,
    ReadMode,
    ReadSettings,
    ReadTally,
    TextTokenizer,
    draw_span,
    estimate,
    plan_decision,
    plans_reads,
)
from app.engine.types import ImageData
from app.errors import ConfigError, ImageError, TemplateError
from app.images import ImagePolicy, fetch_image
from app.runs.jobfile import (
    LineProblem,
    NumberedLine,
    duplicate_reason,
    iter_job_lines,
    read_job_file,
)
from app.runs.submit_images import COMPLETIONS_REFUSED
from app.tokenizer.limits import too_long_for

__all__ = ["DryRunReport", "DryRunRequest", "dry_run"]

#: Images a dry run keeps (emptied when full), with their bytes: a few hundred MiB at most.
_IMAGES_HELD = 256


@dataclass(frozen=True)
class DryRunRequest:
    path: Path
    run_name: str
    settings: ReadSettings
    replicates: int = 1
    strict: bool = False
    prices: Prices = field(default_factory=Prices)
    #: what the decisions' images may be fetched from, as for submit
    images: ImagePolicy = field(default_factory=ImagePolicy)


@dataclass
class DryRunReport:
    """What a submit of the file would store, and what its run would read."""

    request: DryRunRequest
    lines: int = 0
    valid: int = 0
    bad: list[LineProblem] = field(default_factory=list)
    rejected: list[LineProblem] = field(default_factory=list)
    #: endpoint runs: decisions whose reads the reader's plan cannot lay out here (not in
    #: the token counts; the endpoint may still answer them)
    unplanned: int = 0
    tally: ReadTally = field(default_factory=ReadTally)
    #: images fetched so far: ref -> the image, or why it cannot be used (bounded)
    images: dict[str, ImageData | str] = field(default_factory=dict, repr=False)

    @property
    def refused(self) -> bool:
        """--strict would refuse the file (nothing written)."""
        return self.request.strict and bool(self.bad or self.rejected)

    @property
    def by_endpoint(self) -> bool:
        return not plans_reads(self.request.settings.answer_by)

    def estimate(self) -> Estimate:
        return estimate(self.tally, draw_span(self.request.settings),
                        replicates=self.request.replicates, prices=self.request.prices)

    def as_dict(self) -> dict[str, Any]:
        settings, tally, prices = self.request.settings, self.tally, self.request.prices
        return {
            "dry_run": True, "run": self.request.run_name, "lines": self.lines,
            "valid": self.valid, "refused": self.refused,
            "bad_lines": [p.as_dict() for p in self.bad],
            "rejected": [p.as_dict() for p in self.rejected],
            "answer_by": str(settings.answer_by), "tokenizer": settings.tokenizer,
            "layout": settings.layout.value, "mode": settings.read_mode.value,
            "policy": settings.policy.value, "decisions": tally.decisions,
            "questions": tally.questions, "questions_without_read": tally.trivial,
            "replicates": self.request.replicates, "unplanned": self.unplanned,
            "requests": (tally.decisions * self.request.replicates if self.by_endpoint
                         else None),
            "reads_per_draw": tally.units,
            "prompt_tokens_per_read": {"min": tally.prompt_min or 0, "max": tally.prompt_max},
            "prices": {"input_per_mtok": prices.input_per_mtok,
                       "output_per_mtok": prices.output_per_mtok,
                       "gpu_per_hour": prices.gpu_per_hour, "reads_per_s": prices.reads_per_s},
            **self.estimate().as_dict(),
        }


def dry_run(request: DryRunRequest, tokenizer: TextTokenizer, *,
            lines: Iterable[NumberedLine] | None = None) -> DryRunReport:
    """Read, validate and plan every line of ``request.path`` (or ``lines``); store nothing.

    Raises:
        InputError: the file cannot be read at all (``check_job_file``).
        ConfigError: the settings cannot lay a read out with this tokenizer.
    """
    source = lines if lines is not None else read_job_file(request.path)
    report = DryRunReport(request)
    planning = _planning_settings(request.settings)
    first_line: dict[str, int] = {}
    for line_no, item in iter_job_lines(source):
        report.lines += 1
        if isinstance(item, LineProblem):
            report.bad.append(item)
        elif item.id in first_line:
            report.bad.append(LineProblem(line_no, item.id,
                                          duplicate_reason(item.id, first_line[item.id])))
        elif (too_long := too_long_for(item, tokenizer, None)) is not None:
            report.bad.append(LineProblem(line_no, item.id, too_long))
        else:
            first_line[item.id] = line_no
            report.valid += 1
            _plan(report, line_no, item, planning, tokenizer)
    return report


def _planning_settings(settings: ReadSettings) -> ReadSettings:
    """The settings the reads are planned with: the run's own, or for a decision endpoint
    those of vLLM's reader (the ``vllm`` layout, isolated, one draw, the prompt as ids)."""
    if plans_reads(settings.answer_by):
        return settings
    return replace(settings, layout=Layout.VLLM, read_mode=ReadMode.ISOLATED,
                   policy=PolicyName.FIXED, fixed_draws=1, endpoint=Endpoint.COMPLETIONS)


def _asked(decision: Decision, settings: ReadSettings) -> Decision:
    """The decision as the reads see it: its source's ``asked`` (a ``/v1/decisions``
    endpoint's reader reads the request's own wording of the questions); the others, the
    decision."""
    return find_source(settings.answer_by).asked(decision, settings.model)


def _image(report: DryRunReport, ref: str) -> ImageData | str:
    if len(report.images) >= _IMAGES_HELD:
        report.images.clear()
    found = report.images.get(ref)
    if found is None:
        try:
            found = fetch_image(ref, policy=report.request.images)
        except ImageError as exc:
            found = exc.message
        report.images[ref] = found
    return found


def _images(report: DryRunReport, decision: Decision, settings: ReadSettings
            ) -> tuple[ImageData, ...] | str:
    """The decision's images fetched and checked, or why the decision would be rejected."""
    if settings.endpoint is Endpoint.COMPLETIONS and not report.by_endpoint:
        return COMPLETIONS_REFUSED
    fetched = [_image(report, ref) for ref in decision.images]
    problem = next((f for f in fetched if isinstance(f, str)), None)
    return problem if problem is not None else tuple(
        f for f in fetched if isinstance(f, ImageData))


def _plan(report: DryRunReport, line_no: int, decision: Decision, settings: ReadSettings,
          tokenizer: TextTokenizer) -> None:
    images: tuple[ImageData, ...] = ()
    if decision.images:
        checked = _images(report, decision, settings)
        if isinstance(checked, str):
            report.rejected.append(LineProblem(line_no, decision.id, checked))
            return
        images = checked
        if report.by_endpoint:  # the reader's images go on its chat request
            settings = replace(settings, endpoint=Endpoint.CHAT)
    try:
        plan = plan_decision(_asked(decision, settings), settings, tokenizer, images=images,
                                max_model_len=None)
    except ConfigError as exc:
        if not images:
            raise
        report.rejected.append(LineProblem(line_no, decision.id, exc.message))
        return
    except TemplateError as exc:
        if report.by_endpoint:  # the endpoint plans its own reads: not rejected at submit
            report.unplanned += 1
            report.tally.count_unplanned(len(decision.questions))
        else:
            report.rejected.append(LineProblem(line_no, decision.id, exc.message))
        return
    report.tally.add(plan)
