"""The report document's types: the JSON shape of ``dreads report --json``, checked by mypy.

TypedDicts, so the document stays a plain JSON-ready dict (``--json`` prints it as is) while
every part built here is typed. The parts of other modules (diagnostics, the comparison,
spend) are typed where they are made and held here as mappings.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

__all__ = ["Block", "IntervalDict", "KindSections", "Partial", "ReportDocument", "Section"]


class IntervalDict(TypedDict):
    """``Interval.as_dict()``: a 95% interval over items; low/high None when there is none."""

    low: float | None
    high: float | None
    method: str
    level: float


class Block(TypedDict):
    """The figures of one set of answers (``sections.figure_block``)."""

    replicates: int
    figures: dict[str, Any]  #: key -> value, every key of ``specs.SPECS[family]``
    intervals: dict[str, IntervalDict]  #: every figure's, "method": "none" for counts
    draw_sd: dict[str, float | None]  #: sd across replicates, each computed alone; {} for one
    partial: bool  #: the run was not settled
    pooled: bool  #: over all questions of a kind (``--pooled``)


class Section(TypedDict, total=False):
    """One question's (or the pool's) figures overall and per cell; ``confusion`` for choice."""

    overall: Block
    cells: dict[str, Block]
    confusion: dict[str, Any]


class KindSections(TypedDict):
    """One question kind's figures: per question id, and pooled only when asked for."""

    questions: dict[str, Section]
    pooled: Section | None


class Partial(TypedDict):
    """A run with decisions in flight: how many are settled."""

    settled: int
    decisions: int


class ReportDocument(TypedDict):
    """``build_report``'s document, ``"format": "dreads.report/2"`` (docs/commands.md#report)."""

    format: str
    partial: Partial | None
    run: dict[str, Any]
    params: dict[str, Any]
    labelled: dict[str, int]
    headline: dict[str, Any] | None
    review: dict[str, Any] | None
    #: kind name -> KindSections, and "calibration" -> the reliability per question
    raw: dict[str, Any]
    calibrated: dict[str, Any] | None
    calibration_source: dict[str, Any] | None
    cross_fitted: dict[str, Any] | None
    diagnostics: dict[str, Any]
    against: dict[str, Any] | None
    reasons: list[dict[str, Any]]
    #: what the infrastructure did to the run (diagnostics' part, where present)
    infrastructure: NotRequired[dict[str, Any]]
    spend: dict[str, Any] | None
