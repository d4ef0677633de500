"""Time the report's figures and intervals on many answered questions, from rows in memory.

    PYTHONPATH=. python bench/report_figures.py [rows] [questions] [cells] [replicates]

Builds ``rows`` answered yes/no report rows (``questions`` question ids asked of every
decision, ``cells`` cells), then times ``columns_of`` (one pass over the rows) and
``kind_sections`` (every question overall and per cell, pooled too: figures and every
interval), then the rest of the report made from rows (the raw sections as the report makes
them, the cross-fitted calibration and its ECE, the reviewer's lists). Loading the rows from
SQL, the diagnostics and spend are not included.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from app.report.columns import columns_of
from app.report.document import _typed_sections, cross_fitted_rows
from app.report.figures import Params, binary_rows, calibration_figures, noul_figures
from app.report.load import QuestionRow
from app.report.review import review
from app.report.sections import kind_sections


def _rows(n: int, questions: int, cells: int, replicates: int) -> list[QuestionRow]:
    rng = np.random.default_rng(0)
    decisions = n // (questions * replicates)
    y = rng.random(decisions * questions) < 0.1
    out = []
    for rep in range(replicates):
        p = np.clip(0.5 + np.where(y, 0.2, -0.2) + rng.normal(0, 0.2, y.size), 0, 1)
        for i in range(y.size):
            d = i // questions
            out.append(QuestionRow(
                decision_key=f"d{d}", replicate=rep, cell=f"c{d % cells}", state_key=f"s{d}",
                status="done", question_id=f"q{i % questions}", question_type="noul",
                labels=("yes", "no"), expected="yes" if y[i] else "no", answered=True,
                label="yes" if p[i] > 0.5 else "no", p_yes=float(p[i])))
    return out


def main() -> None:
    args = [int(a) for a in sys.argv[1:]]
    n, questions, cells, replicates = (args + [1_000_000, 4, 8, 1][len(args):])[:4]
    rows = _rows(n, questions, cells, replicates)
    start = time.perf_counter()
    cols = columns_of(rows, typed=False)
    built = time.perf_counter()
    kind_sections(cols, noul_figures, Params())
    done = time.perf_counter()
    kind_sections(cols, noul_figures, Params(), pooled=True)
    pooled = time.perf_counter()
    print(f"{len(rows):,} rows, {questions} questions, {cells} cells, {replicates} replicate(s): "
          f"columns {built - start:.1f} s, figures and intervals {done - built:.1f} s "
          f"({pooled - done:.1f} s with --pooled)", flush=True)
    p = Params()
    start = time.perf_counter()
    _typed_sections(rows, p)
    sections = time.perf_counter()
    fitted = cross_fitted_rows(rows)
    calibration_figures(binary_rows(fitted or rows), p)
    calibrated = time.perf_counter()
    review(rows, p)
    end = time.perf_counter()
    print(f"report from rows: sections {sections - start:.1f} s, cross-fitted calibration "
          f"{calibrated - sections:.1f} s, review {end - calibrated:.1f} s, total "
          f"{end - start:.1f} s")


if __name__ == "__main__":
    main()
