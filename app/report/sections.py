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
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from app.engine import Family
from app.report import specs
from app.report.columns import Columns, averaged, columns_of, grouped
from app.report.figures import FamilyFigures, Figures, Params
from app.report.intervals import ClusteredBootstrap, Interval, wilson
from app.report.load import QuestionRow
from app.report.shape import Block, IntervalDict, KindSections, Section
from app.report.specs import FigureKind, Method

__all__ = ["block_intervals", "figure_block", "kind_sections", "question_blocks", "section"]


@lru_cache(maxsize=4096)
def _wilson(k: int, n: int) -> Interval:
    return wilson(k, n)


def _rate_interval(s: specs.FigureSpec, figures: Figures) -> Interval:
    k, n = figures.get(s.hits or ""), figures.get(s.total or "")
    if not isinstance(k, int) or not isinstance(n, int) or k > n:
        return Interval(None, None, Method.WILSON.value)
    ci = _wilson(k, n)
    if ci.low is None or ci.high is None:
        return ci
    return Interval(ci.low * s.scale, ci.high * s.scale, ci.method, ci.level)


def _typed(interval: Interval) -> IntervalDict:
    return IntervalDict(low=interval.low, high=interval.high, method=interval.method,
                        level=interval.level)


def block_intervals(fam: FamilyFigures, cols: Columns, p: Params, figures: Figures,
                    boot: ClusteredBootstrap | None = None) -> dict[str, IntervalDict]:
    """An interval entry for every figure (``specs``: Wilson from the counts, the rest from
    the family's own)."""
    own = fam.intervals(cols, p, figures, boot)
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


def _columns(rows: Sequence[QuestionRow], fam: FamilyFigures) -> Columns:
    return columns_of(rows, typed=fam.family is not Family.BINARY)


def _block(fam: FamilyFigures, p: Params, answers: Columns, raw: Columns,
           boot: ClusteredBootstrap, *, partial: bool, pooled: bool) -> Block:
    """The BLOCK of ``answers`` (replicates averaged), ``raw`` their rows (for the draw
    noise), ``boot`` over the decisions of ``answers``' done entries."""
    replicates = raw.replicates
    figures = fam(answers, p)
    specs.check_keys(fam.family, figures)
    return Block(replicates=replicates, figures=figures,
                 intervals=block_intervals(fam, answers, p, figures, boot),
                 draw_sd=_draw_sd(fam, raw, p) if replicates > 1 else {},
                 partial=partial, pooled=pooled)


def figure_block(rows: Sequence[QuestionRow] | Columns, fam: FamilyFigures, p: Params, *,
                 partial: bool = False, pooled: bool = False) -> Block:
    """The BLOCK of ``rows`` (see the module)."""
    cols = rows if isinstance(rows, Columns) else _columns(rows, fam)
    answers = averaged(cols) if cols.replicates > 1 else cols
    boot = ClusteredBootstrap(answers.decision[fam.done(answers)], seed=p.seed)
    return _block(fam, p, answers, cols, boot, partial=partial, pooled=pooled)


def section(rows: Sequence[QuestionRow] | Columns, fam: FamilyFigures, p: Params, *,
            partial: bool = False, pooled: bool = False) -> Section:
    """``{"overall": BLOCK, "cells": {cell: BLOCK}}`` of one set of entries."""
    cols = rows if isinstance(rows, Columns) else _columns(rows, fam)
    cells = grouped(cols.cell, cols.cell_names)
    return Section(
        overall=figure_block(cols, fam, p, partial=partial, pooled=pooled),
        cells={cell: figure_block(cols.take(index), fam, p, partial=partial, pooled=pooled)
               for cell, index in cells.items()},
    )


class _Resampling:
    """The bootstraps of one kind's blocks, drawn as few times as possible: one over all its
    answered decisions, one per cell; a question asked in every decision (of a cell) shares
    the draw of the whole (of the cell), so its figures and the pool's see the same
    resamples."""

    def __init__(self, fam: FamilyFigures, answers: Columns, seed: int) -> None:
        done = fam.done(answers)
        self.position = np.full(len(answers), -1, dtype=np.int64)
        self.position[done] = np.arange(int(done.sum()))
        self.root = (ClusteredBootstrap(answers.decision[done], seed=seed),
                     np.arange(int(done.sum())))

    def child(self, index: NDArray[np.intp],
              parent: tuple[ClusteredBootstrap, NDArray[np.int64]] | None = None
              ) -> tuple[ClusteredBootstrap, NDArray[np.int64]]:
        """The bootstrap of the entries at ``index`` (ascending), from ``parent``'s draw."""
        boot, rows_of_parent = parent or self.root
        rows = self.position[index]
        rows = rows[rows >= 0]
        return boot.subset(np.searchsorted(rows_of_parent, rows)), rows


def kind_sections(rows: Sequence[QuestionRow] | Columns, fam: FamilyFigures, p: Params, *,
                  pooled: bool = False, partial: bool = False) -> KindSections:
    """One kind's figures per question id, and over all its questions only with ``pooled``
    (and more than one question: one question's figures are the whole, not a pool).

    The replicates are averaged once, and the bootstrap drawn once per cell (``_Resampling``):
    O(n log n) in the rows, whatever the number of questions and cells.
    """
    raw = rows if isinstance(rows, Columns) else _columns(rows, fam)
    answers = averaged(raw) if raw.replicates > 1 else raw
    resampling = _Resampling(fam, answers, p.seed)
    a_questions = grouped(answers.question, answers.question_names)
    r_questions = grouped(raw.question, raw.question_names)
    a_cells = grouped(answers.cell, answers.cell_names)
    r_cells = grouped(raw.cell, raw.cell_names)
    cell_boots = {c: resampling.child(index) for c, index in a_cells.items()}

    def block(a_index: NDArray[np.intp], r_index: NDArray[np.intp],
              boot: ClusteredBootstrap, *, is_pool: bool = False) -> Block:
        return _block(fam, p, answers.take(a_index), raw.take(r_index), boot,
                      partial=partial, pooled=is_pool)

    questions: dict[str, Section] = {}
    for q, a_q in a_questions.items():
        cells: dict[str, Block] = {}
        for c, a_c in a_cells.items():
            a_qc = np.intersect1d(a_q, a_c, assume_unique=True)
            if a_qc.size:
                boot, _ = resampling.child(a_qc, cell_boots[c])
                cells[c] = block(a_qc, np.intersect1d(r_questions[q], r_cells[c],
                                                      assume_unique=True), boot)
        questions[q] = Section(overall=block(a_q, r_questions[q], resampling.child(a_q)[0]),
                               cells=cells)
    pool = None
    if pooled and len(a_questions) > 1:
        everything = np.arange(len(answers))
        pool = Section(
            overall=block(everything, np.arange(len(raw)), resampling.root[0], is_pool=True),
            cells={c: block(a_c, r_cells[c], cell_boots[c][0], is_pool=True)
                   for c, a_c in a_cells.items()})
    return KindSections(questions=questions, pooled=pool)


def question_blocks(kind_section: Mapping[str, Any]) -> dict[str, Block]:
    """Each question's overall BLOCK of a kind's sections (``kind_sections``)."""
    return {q: sec["overall"] for q, sec in kind_section["questions"].items()}
