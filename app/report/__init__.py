"""Evaluation reports of runs: figures, diagnostics per cell, calibration, comparison, HTML.

    load.py         SQL -> one row per (decision, question), per-cell read / attempt counts
    metrics.py      pure numpy / scikit-learn / scipy figures over arrays
    figures.py      figure blocks overall and per cell, mean ± sd across replicates
    diagnostics.py  unanswered, failures by kind, label mass, draws; outlier cells flagged
    calibration.py  isotonic / Platt maps fitted with scikit-learn, calib.json
    compare.py      two runs of the same decisions side by side
    document.py     build_report() -> the JSON document; summarize_run() for `dreads run`
    tables.py       Rich rendering;  html.py  one self-contained HTML page (matplotlib Agg)
"""

from __future__ import annotations

from app.report.calibration import (
    Calibration,
    CalibrationMethod,
    fit_calibration,
    load_calibration,
)
from app.report.document import build_report, calibrate_rows, report_from_rows, summarize_run
from app.report.figures import Params
from app.report.load import QuestionRow, RunRows, load_run_rows, resolve_run

__all__ = [
    "Calibration",
    "CalibrationMethod",
    "Params",
    "QuestionRow",
    "RunRows",
    "build_report",
    "calibrate_rows",
    "fit_calibration",
    "load_calibration",
    "load_run_rows",
    "report_from_rows",
    "resolve_run",
    "summarize_run",
]
