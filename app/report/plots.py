"""The report's plots: matplotlib (Agg), one figure size for all, embedded as base64 PNG.

Every plot has the same size and the same axes for the same quantity: P(yes) and label mass
run 0-1 on x, counts use one count axis (linear up to 1, then logarithmic, ticks 0, 1, 10,
100, ... written out), shares run 0-1. Each comes with a caption saying how to read it.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from app.report import scores as m
from app.report.figures import binary_rows, noul_arrays
from app.report.load import QuestionRow

__all__ = ["SIZE_IN", "Plot", "report_plots"]

#: every plot's size in inches (at ``_DPI``: 520 x 360 pixels)
SIZE_IN = (5.2, 3.6)
_DPI = 100
_BINS = [i / 40 for i in range(41)]
_MAX_QUESTION_CURVES = 8
Curves = Mapping[str, tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Plot:
    """One plot: a title, how to read it, and the PNG as a data URL."""

    title: str
    caption: str
    data_url: str


def _axes() -> tuple[Figure, Axes]:
    # Figure + the Agg canvas directly, not pyplot: no global state, no GUI backend.
    fig = Figure(figsize=SIZE_IN, dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _data_url(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)  # no tight bbox: every plot keeps SIZE_IN
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _count_axis(ax: Axes, top: int) -> None:
    """Counts: linear from 0 to 1, logarithmic above; ticks written out (0, 1, 10, 100)."""
    ax.set_yscale("symlog", linthresh=1.0, linscale=0.4)
    ticks = [0.0, *[10.0 ** k for k in range(len(str(max(top, 1))))]]
    ax.set_ylim(0, max(top, 1) * 1.5)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.yaxis.set_minor_locator(NullLocator())


def _score_plot(y: np.ndarray, s: np.ndarray, top: int, which: str) -> Plot:
    fig, ax = _axes()
    ax.hist(s[y == 0], bins=_BINS, alpha=0.6, color="tab:blue",
            label=f"negatives ({int((y == 0).sum())})")
    ax.hist(s[y == 1], bins=_BINS, alpha=0.8, color="tab:red",
            label=f"positives ({int(y.sum())})")
    _count_axis(ax, top)
    ax.set(xlabel=f"{which} P(yes)", ylabel="questions", xlim=(0, 1))
    ax.legend(loc="upper center")
    return Plot(f"{which} P(yes) of positives and negatives",
                "How many questions got each P(yes), positives in red, negatives in blue. "
                "A good ranking puts red on the right and blue on the left.", _data_url(fig))


def _reliability_plot(curves: Curves, title: str, caption: str) -> Plot:
    fig, ax = _axes()
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfectly calibrated")
    for name, (y, s) in curves.items():
        points = [(b.mean_score, b.observed) for b in m.reliability_bins(y, s)
                  if b.mean_score is not None and b.observed is not None]
        ece = m.ece(y, s)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                label=f"{name} (ECE {'-' if ece is None else f'{ece:.3f}'})")
    ax.set(xlabel="mean P(yes) in the bin", ylabel="share of positives", xlim=(0, 1),
           ylim=(0, 1))
    ax.legend(loc="upper left")
    return Plot(title, caption, _data_url(fig))


def _rank_plot(y: np.ndarray, s: np.ndarray) -> Plot:
    pct = np.sort(m.positive_rank_percentiles(y, s))
    fig, ax = _axes()
    if pct.size:
        ax.step([0.0, *pct], [0.0, *(np.arange(1, pct.size + 1) / pct.size)], where="post",
                color="tab:red", label="positives")
    ax.plot([0, 100], [0, 1], color="grey", linestyle="--", linewidth=1, label="random order")
    ax.set(xlabel="rank by P(yes), % of all questions (0 = top)",
           ylabel="share of positives found", xlim=(0, 100), ylim=(0, 1))
    ax.legend(loc="lower right")
    return Plot("rank of the positives",
                "Going down the questions from the highest P(yes), the share of positives "
                "found so far. The closer the red line hugs the top left, the fewer "
                "questions a reviewer reads to find them all.", _data_url(fig))


def _mass_plot(mass: np.ndarray, top: int) -> Plot:
    fig, ax = _axes()
    ax.hist(mass, bins=_BINS, color="tab:green")
    ax.axvline(0.5, color="tab:red", linestyle="--", linewidth=1, label="0.5")
    _count_axis(ax, top)
    ax.set(xlabel="label mass (mean over draws)", ylabel="answers", xlim=(0, 1))
    ax.legend(loc="upper left")
    return Plot(f"label mass ({int((mass < 0.5).sum())} of {mass.size} below 0.5)",
                "How much probability each answer put on the allowed labels. Answers left "
                "of the red line are bad reads, not answers.", _data_url(fig))


def _per_question(rows: Sequence[QuestionRow]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    groups: dict[str, list[QuestionRow]] = {}
    for r in rows:
        groups.setdefault(r.question_id, []).append(r)
    curves = {}
    for qid in sorted(groups):
        y, s, _ = noul_arrays(groups[qid])
        if y.size:
            curves[qid] = (y, s)
    return curves


def _reliability(curves: Curves, calibrated_by: str | None) -> Plot:
    caption = ("Answers binned by P(yes): the mean P(yes) of a bin against the share of "
               "positives in it. On the dashed line P(yes) means what it says")
    if "calibrated" not in curves:
        caption += "; too few labels of either class for a calibrated curve."
    elif calibrated_by == "--calibration":
        caption += "; the calibrated curve is P(yes) through --calibration."
    else:
        caption += (f"; the calibrated curve is P(yes) through a {calibrated_by} map (each "
                    "answer's map fitted on the other folds): what calibrating this model "
                    "would give. --calibration applies a map fitted on another run.")
    return _reliability_plot(curves, "calibration: raw and calibrated" if "calibrated" in
                             curves else "calibration (raw)", caption)


def _noul_plots(noul: Sequence[QuestionRow], calibrated: Sequence[QuestionRow] | None,
                top: int, calibrated_by: str | None) -> list[Plot]:
    y, s, _ = noul_arrays(noul)
    if not y.size:
        return []
    plots = [_score_plot(y, s, top, "raw")]
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {"raw": (y, s)}
    if calibrated is not None:
        yc, sc, _ = noul_arrays(binary_rows(calibrated))
        curves["calibrated"] = (yc, sc)
    plots += [_reliability(curves, calibrated_by), _rank_plot(y, s)]
    if calibrated is not None and calibrated_by == "--calibration":
        plots.append(_score_plot(*curves["calibrated"], top, "calibrated"))
    per_question = _per_question(noul)
    if 1 < len(per_question) <= _MAX_QUESTION_CURVES:
        plots.append(_reliability_plot(per_question, "calibration per question (raw)",
                                       "The calibration curve of each yes/no question."))
    return plots


def report_plots(rows: Sequence[QuestionRow],
                 calibrated: Sequence[QuestionRow] | None = None,
                 calibrated_by: str | None = None) -> list[Plot]:
    """Every plot of the page: P(yes) of positives and negatives, calibration (raw and
    ``calibrated``, made as ``calibrated_by`` says), ranks of the positives, label mass; per
    question when 2-8 questions."""
    mass = np.array([r.label_mass for r in rows if r.label_mass is not None], dtype=float)
    top = max(len(rows), 1)
    return [*_noul_plots(binary_rows(rows), calibrated, top, calibrated_by),
            _mass_plot(mass, top)]
