"""Evaluation reports of runs: figures, diagnostics per cell, calibration, comparison, HTML.

    load.py         SQL -> one row per (decision, question), per-cell read / attempt counts
    scores.py       pure numpy / scikit-learn / scipy figures over arrays (AUC, recall@k, ECE)
    specs.py        the one table of figures: key, title, kind, interval method, where shown
    columns.py      report rows as numpy columns; replicates averaged per (decision, question)
    figures.py      each family's figures and their intervals (intervals.py's methods)
    sections.py     blocks per question and per cell, pooled only when asked; draw noise
    intervals.py    Wilson, DeLong, clustered bootstrap, order statistic; paired tests
    shape.py        the report document's types (TypedDicts)
    figure_text.py  a figure with its interval as text, for every rendering
    labels.py       threshold slots of the titles, the run's identity
    diagnostics.py  unanswered, failures by kind, label mass, draws; outlier cells flagged
    calibration.py  isotonic / Platt maps fitted with scikit-learn, calib.json; methods.py
                    their names
    compare.py      two runs of the same decisions side by side
    document.py     build_report() -> the JSON document; summarize_run() for `dreads run`
    headline.py     the headline figures with counts, worded once for every rendering
    review.py       the missed positives and top false positives
    spend.py        the spend section: cost per run, per cell, per 1,000 decisions
    thumbnails.py   the listed questions' image thumbnails, made at report time
    tables.py       Rich rendering;  html.py  one self-contained HTML page, with
                    html_tables.py, plots.py (matplotlib Agg) and glossary.py
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: public name -> the module defining it; imported on first use, so that importing one part
#: (``app.report.tables`` for the CLI's status view) does not load scikit-learn, scipy and
#: matplotlib.
_WHERE = {
    "Calibration": "calibration", "CalibrationMethod": "calibration",
    "fit_calibration": "calibration", "load_calibration": "calibration",
    "build_report": "document", "calibrate_rows": "document", "report_from_rows": "document",
    "summarize_run": "document", "Params": "figures", "QuestionRow": "load",
    "RunRows": "load", "load_run_rows": "load", "resolve_run": "load",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'app.report' has no attribute {name!r}")
    return getattr(import_module(f"app.report.{_WHERE[name]}"), name)


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
