"""Figure blocks, sections per cell, and one question kind's sections per question.

A BLOCK is the figures of one set of entries with their intervals::

    {"replicates": k, "figures": {key: value}, "intervals": {key: Interval.as_dict()},
     "draw_sd": {key: sd}, "partial": bool, "pooled": bool}

With replicates, ``figures`` and ``intervals`` come from the replicate-averaged answers
(``columns.averaged``), so a figure and its interval agree; ``draw_sd`` is the sample standard
deviation of each figure computed on every replicate alone: the draw noise, apart from the
interval over items. Every figure has an interval entry; a count's says ``"method": "none"``.

A SECTION is ``{"overall": BLOCK, "cells": {cell: BLOCK}}``; a kind's figures are
``{"questions": {question id: SECTION}, "pooled": SECTION | None}``, never pooled over
questions unless asked (``pooled=True``), and then marked ``"pooled": true``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from app.report import specs
from app.report.columns import Columns, averaged, columns_of, grouped
from app.report.figures import FamilyFigures, Figures, Params
from app.report.intervals import Interval, wilson
from app.report.load import QuestionRow
from app.report.shape import Block, IntervalDict, KindSections, Section
from app.report.specs import FigureKind, Method

__all__ = ["block_intervals", "figure_block", "kind_sections", "question_blocks", "section"]


def _rate_interval(s: specs.FigureSpec, figures: Figures) -> Interval:
    k, n = figures.get(s.hits or ""), figures.get(s.total or "")
    if not isinstance(k, int) or not isinstance(n, int) or k > n:
        return Interval(None, None, Method.WILSON.value)
    ci = wilson(k, n)
    if ci.low is None or ci.high is None:
        return ci
    return Interval(ci.low * s.scale, ci.high * s.scale, ci.method, ci.level)


def _typed(interval: Interval) -> IntervalDict:
    return IntervalDict(low=interval.low, high=interval.high, method=interval.method,
                        level=interval.level)


def block_intervals(fam: FamilyFigures, cols: Columns, p: Params,
                    figures: Figures) -> dict[str, IntervalDict]:
    """An interval entry for every figure (``specs``: Wilson from the counts, the rest from
    the family's own)."""
    own = fam.intervals(cols, p, figures)
    out: dict[str, IntervalDict] = {}
    for s in specs.specs_of(fam.family):
        if s.kind is FigureKind.RATE:
            out[s.key] = _typed(_rate_interval(s, figures))
        elif s.has_interval:
            out[s.key] = _typed(own.get(s.key, Interval(None, None, s.method.value)))
        else:
            out[s.key] = _typed(Interval(None, None, Method.NONE.value))
    return out


def _draw_sd(fam: FamilyFigures, cols: Columns, p: Params) -> dict[str, float | None]:
    """Each non-count figure's sample sd across replicates, each replicate computed alone."""
    per_rep = [fam(cols.take(cols.replicate == r), p)
               for r in np.unique(cols.replicate).tolist()]
    out: dict[str, float | None] = {}
    for s in specs.specs_of(fam.family):
        if s.kind is FigureKind.COUNT:
            continue
        values = [f[s.key] for f in per_rep if f[s.key] is not None]
        out[s.key] = float(np.std(values, ddof=1)) if len(values) > 1 else None
    return out


def figure_block(rows: Sequence[QuestionRow] | Columns, fam: FamilyFigures, p: Params, *,
                 partial: bool = False, pooled: bool = False) -> Block:
    """The BLOCK of ``rows`` (see the module)."""
    cols = rows if isinstance(rows, Columns) else columns_of(rows)
    replicates = cols.replicates
    answers = averaged(cols) if replicates > 1 else cols
    figures = fam(answers, p)
    specs.check_keys(fam.family, figures)
    return Block(replicates=replicates, figures=figures,
                 intervals=block_intervals(fam, answers, p, figures),
                 draw_sd=_draw_sd(fam, cols, p) if replicates > 1 else {},
                 partial=partial, pooled=pooled)


def section(rows: Sequence[QuestionRow] | Columns, fam: FamilyFigures, p: Params, *,
            partial: bool = False, pooled: bool = False) -> Section:
    """``{"overall": BLOCK, "cells": {cell: BLOCK}}`` of one set of entries."""
    cols = rows if isinstance(rows, Columns) else columns_of(rows)
    cells = grouped(cols.cell, cols.cell_names)
    return Section(
        overall=figure_block(cols, fam, p, partial=partial, pooled=pooled),
        cells={cell: figure_block(cols.take(index), fam, p, partial=partial, pooled=pooled)
               for cell, index in cells.items()},
    )


def kind_sections(rows: Sequence[QuestionRow] | Columns, fam: FamilyFigures, p: Params, *,
                  pooled: bool = False, partial: bool = False) -> KindSections:
    """One kind's figures per question id, and over all its questions only with ``pooled``
    (and more than one question: one question's figures are the whole, not a pool)."""
    cols = rows if isinstance(rows, Columns) else columns_of(rows)
    questions = grouped(cols.question, cols.question_names)
    return KindSections(
        questions={q: section(cols.take(index), fam, p, partial=partial)
                   for q, index in questions.items()},
        pooled=section(cols, fam, p, partial=partial, pooled=True)
        if pooled and len(questions) > 1 else None)


def question_blocks(kind_section: Mapping[str, Any]) -> dict[str, Block]:
    """Each question's overall BLOCK of a kind's sections (``kind_sections``)."""
    return {q: sec["overall"] for q, sec in kind_section["questions"].items()}
