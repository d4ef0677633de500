"""One self-contained HTML report: matplotlib (Agg) plots embedded as base64 PNG, and tables.

Plots: score distributions of positives and negatives, the reliability diagram (raw and, with
a calibration, calibrated), the rank plot of the positives, the label mass histogram. Tables:
headline figures, figures per cell with flags, diagnostics per cell, the comparison.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from app.report import metrics as m
from app.report.figures import noul_arrays, typed_rows
from app.report.labels import (
    CHOICE_COLUMNS,
    NOUL_COLUMNS,
    SCORE_COLUMNS,
    column_titles,
    run_identity,
)
from app.report.load import QuestionRow
from app.report.tables import fmt, pct

__all__ = ["render_html"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#f3f3f3;white-space:normal}td:first-child,th:first-child{text-align:left}
tr.flag td{background:#fde8e8}tr.overall td{font-weight:bold}
.flags{color:#b00;font-weight:bold}.plots img{max-width:620px;margin:4px}
.note{color:#555;font-size:13px}
.sim{background:#fff3cd;border:2px solid #c90;padding:8px 12px;font-weight:bold}
"""


def _axes(width: float, height: float) -> tuple[Figure, Axes]:
    # Figure + the Agg canvas directly, not pyplot: no global state, no GUI backend.
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


def _score_plot(y: np.ndarray, s: np.ndarray, title: str) -> str:
    fig, ax = _axes(6.5, 3.6)
    bins = [i / 40 for i in range(41)]
    ax.hist(s[y == 0], bins=bins, alpha=0.6, label=f"negatives ({int((y == 0).sum())})",
            color="tab:blue")
    ax.hist(s[y == 1], bins=bins, alpha=0.7, label=f"positives ({int(y.sum())})",
            color="tab:red")
    ax.set_yscale("symlog")
    ax.set(xlabel="P(yes)", ylabel="questions", title=title)
    ax.legend()
    return _png(fig)


def _reliability_plot(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], title: str) -> str:
    fig, ax = _axes(4.8, 4.4)
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfect")
    for name, (y, s) in curves.items():
        points = [(b.mean_score, b.observed) for b in m.reliability_bins(y, s)
                  if b.mean_score is not None and b.observed is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                label=f"{name} (ECE {fmt(m.ece(y, s))})")
    ax.set(xlabel="mean P(yes) in bin", ylabel="observed share of yes",
           title=title, xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="upper left")
    return _png(fig)


def _rank_plot(y: np.ndarray, s: np.ndarray) -> str:
    pct = np.sort(m.positive_rank_percentiles(y, s))
    fig, ax = _axes(5.5, 4.0)
    if pct.size:
        ax.step(pct, np.arange(1, pct.size + 1) / pct.size, where="post", color="tab:red")
    ax.plot([0, 100], [0, 1], color="grey", linestyle="--", linewidth=1, label="random order")
    ax.set(xlabel="rank of the positive (% of all questions, 0 = top)",
           ylabel="share of positives found", title="rank of the positives", xlim=(0, 100))
    ax.legend(loc="lower right")
    return _png(fig)


def _mass_plot(rows: Sequence[QuestionRow]) -> str:
    mass = np.array([r.label_mass for r in rows if r.label_mass is not None], dtype=float)
    fig, ax = _axes(5.5, 3.6)
    ax.hist(mass, bins=[i / 40 for i in range(41)], color="tab:green")
    ax.axvline(0.5, color="tab:red", linestyle="--", linewidth=1)
    ax.set_yscale("symlog")
    ax.set(xlabel="label mass (mean over draws)", ylabel="answers",
           title=f"label mass ({int((mass < 0.5).sum())} of {mass.size} below 0.5)")
    return _png(fig)


def _plots(rows: Sequence[QuestionRow], calibrated: Sequence[QuestionRow] | None) -> str:
    noul = typed_rows(rows, "noul")
    y, s, _ = noul_arrays(noul)
    imgs: list[str] = []
    if y.size:
        imgs.append(_score_plot(y, s, "P(yes) of positives and negatives"))
        curves = {"raw": (y, s)}
        if calibrated is not None:
            yc, sc, _ = noul_arrays(typed_rows(calibrated, "noul"))
            imgs.append(_score_plot(yc, sc, "calibrated P(yes)"))
            curves["calibrated"] = (yc, sc)
        imgs.append(_reliability_plot(curves, "reliability diagram"))
        imgs.append(_rank_plot(y, s))
        per_question = _per_question_curves(noul)
        if 1 < len(per_question) <= _MAX_QUESTION_CURVES:
            imgs.append(_reliability_plot(per_question, "reliability per question (raw)"))
    imgs.append(_mass_plot(rows))
    return '<div class="plots">' + "".join(imgs) + "</div>"


_MAX_QUESTION_CURVES = 8


def _per_question_curves(rows: Sequence[QuestionRow]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    groups: dict[str, list[QuestionRow]] = {}
    for r in rows:
        groups.setdefault(r.question_id, []).append(r)
    curves = {}
    for qid in sorted(groups):
        y, s, _ = noul_arrays(groups[qid])
        if y.size:
            curves[qid] = (y, s)
    return curves


def _calibration_table(doc: Mapping[str, Any]) -> str:
    raw = doc["raw"]["calibration"]
    cal = doc["calibrated"]["calibration"] if doc["calibrated"] else None
    head = ["question", "n", "yes", "AUC", "ECE", "Brier",
            *(["ECE calibrated", "Brier calibrated"] if cal else [])]
    parts = ["<table>", _head(head)]
    for qid, c in [*raw["questions"].items(), ("overall", raw["overall"])]:
        extra = []
        if cal:
            cq = cal["overall"] if qid == "overall" else cal["questions"][qid]
            extra = [fmt(cq["ece"]), fmt(cq["brier"])]
        parts.append(_row([qid, fmt(c["n"]), fmt(c["positives"]), fmt(c["auc"]),
                           fmt(c["ece"]), fmt(c["brier"]), *extra],
                          "overall" if qid == "overall" else ""))
    return "".join(parts) + "</table>"


def _row(cells: Sequence[str], cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<tr{attr}>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"


def _head(cells: Sequence[str]) -> str:
    return "<tr>" + "".join(f"<th>{escape(c)}</th>" for c in cells) + "</tr>"


def _block(block: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    std = block.get("std") or {}
    return [fmt(block["figures"].get(n), std.get(n)) for n in names]


def _cell_table(section: Mapping[str, Any], columns: Mapping[str, str],
                params: Mapping[str, Any], flags: Mapping[str, list[str]]) -> str:
    parts = ["<table>", _head(["cell", *column_titles(columns, params), "flags"])]
    for cell, block in section["cells"].items():
        cell_flags = flags.get(cell) or []
        parts.append(_row([cell, *_block(block, list(columns)), ", ".join(cell_flags)],
                          "flag" if cell_flags else ""))
    parts.append(_row(["overall", *_block(section["overall"], list(columns)), ""], "overall"))
    return "".join(parts) + "</table>"


def _diag_table(diag: Mapping[str, Any]) -> str:
    parts = ["<table>", _head(["cell", "questions", "unanswered", "in flight", "failed attempts",
                               "low mass", "argmax≠label", "draws mean", "stop reasons",
                               "stderr p50", "stderr p90", "flags"])]
    for cell, d in [*diag["cells"].items(), ("overall", diag["overall"])]:
        parts.append(_row([
            cell, fmt(d["questions"]), f"{d['unanswered']} ({pct(d['unanswered_rate'])})",
            fmt(d["in_flight"]),
            ", ".join(f"{k} {v}" for k, v in d["failures"].items()) or "-",
            pct(d["low_mass_share"]), pct(d["argmax_not_label_share"]), fmt(d["draws_mean"]),
            ", ".join(f"{k} {v}" for k, v in d["stop_reasons"].items()) or "-",
            fmt(d["stderr"]["p50"]), fmt(d["stderr"]["p90"]), ", ".join(d["flags"]),
        ], "flag" if d["flags"] else ("overall" if cell == "overall" else "")))
    return "".join(parts) + "</table>"


def _side_by_side(blocks: Mapping[str, Mapping[str, Any]], columns: Mapping[str, str],
                  params: Mapping[str, Any], diff: Mapping[str, Any] | None = None) -> str:
    parts = ["<table>", _head(["figure", *blocks, *(["Δ (a-b)"] if diff else [])])]
    for name, title in zip(columns, column_titles(columns, params), strict=True):
        values = [_block(b, [name])[0] for b in blocks.values()]
        parts.append(_row([title, *values, *([fmt(diff.get(name))] if diff else [])]))
    return "".join(parts) + "</table>"


_KINDS = (("noul", NOUL_COLUMNS, "yes/no"), ("choice", CHOICE_COLUMNS, "choice"),
          ("score", SCORE_COLUMNS, "score"))


def _figure_sections(doc: Mapping[str, Any], flags: Mapping[str, list[str]]) -> list[str]:
    out: list[str] = []
    params = doc["params"]
    for kind, columns, title in _KINDS:
        if not doc["labelled"][kind]:
            continue
        out.append(f"<h2>{title} figures per cell</h2>")
        out.append(_cell_table(doc["raw"][kind], columns, params, flags))
        if kind == "noul" and doc["calibrated"]:
            out.append("<h2>yes/no overall: raw and calibrated</h2>")
            out.append(_side_by_side({"raw": doc["raw"]["noul"]["overall"],
                                      "calibrated": doc["calibrated"]["noul"]["overall"]},
                                     columns, params))
            out.append("<h3>calibrated, per cell</h3>")
            out.append(_cell_table(doc["calibrated"]["noul"], columns, params, flags))
        if kind == "noul":
            out.append("<h2>calibration per question (yes/no)</h2>")
            out.append(_calibration_table(doc))
    return out


def _against_section(doc: Mapping[str, Any]) -> list[str]:
    cmp = doc["against"]
    out = [f"<h2>comparison: a = {escape(cmp['a'])}, b = {escape(cmp['b'])}</h2>",
           f'<p class="note">{cmp["matched"]} matched question(s); {cmp["only_a"]} only in a, '
           f'{cmp["only_b"]} only in b.</p>']
    for kind, columns, title in _KINDS:
        for cell, pair in [("overall", cmp[kind]["overall"]), *cmp[kind]["cells"].items()]:
            if not cmp[kind]["cells"]:
                break
            out.append(f"<h3>{escape(title)}: {escape(cell)}</h3>")
            out.append(_side_by_side({"a": pair["a"], "b": pair["b"]}, columns, doc["params"],
                                     diff=pair["diff"]))
    if cmp.get("disagreement"):
        out += _disagreement_html(cmp["disagreement"])
    return out


def _identity(doc: Mapping[str, Any]) -> list[str]:
    run = doc["run"]
    out = []
    if run.get("simulator"):
        out.append('<p class="sim">SIMULATOR: these answers come from dreads sim (synthetic '
                   "logprobs), not from a model; the figures test the pipeline, not a model."
                   "</p>")
    summary = (f"{doc['labelled']['questions']} question(s), "
               f"{doc['labelled']['with_expected']} with an expected label"
               + ("; figures are mean ± sd across replicates" if run["replicates"] > 1
                  else ""))
    lines = [*run_identity(run), summary]
    out.append('<p class="note">' + "<br>".join(escape(line) for line in lines) + "</p>")
    return out


def _reasons(doc: Mapping[str, Any]) -> list[str]:
    if not doc.get("reasons"):
        return []
    parts = ["<h2>why decisions failed or were rejected</h2><table>",
             _head(["kind", "decisions", "reason (an example)"])]
    parts += [_row([r["kind"], str(r["count"]), r["example"]]) for r in doc["reasons"]]
    return ["".join(parts) + "</table>"]


def _disagreement_html(dis: Mapping[str, Any]) -> list[str]:
    def cell_row(cell: str, t: Mapping[str, Any]) -> str:
        return (f"<tr><td>{escape(cell)}</td><td>{t['both_answered']}</td>"
                f"<td>{t['differ']} ({pct(t['differ_rate'])})</td>"
                f"<td>{fmt(t['mean_distance'])}</td><td>{fmt(t['max_distance'])}</td></tr>")

    rows = "".join(cell_row(c, t) for c, t in [*dis["cells"].items(),
                                               ("overall", dis["overall"])])
    worst = "".join(f"<tr><td>{escape(str(r['decision']))}</td><td>{escape(r['question'])}"
                    f"</td><td>{escape(r['cell'])}</td><td>{escape(str(r['a']))}</td>"
                    f"<td>{escape(str(r['b']))}</td><td>{fmt(r['distance'])}</td></tr>"
                    for r in dis["largest"])
    return ["<h3>where a and b disagree (questions both answered)</h3>",
            "<table><tr><th>cell</th><th>both answered</th><th>other answer</th>"
            f"<th>mean |Δp|</th><th>max |Δp|</th></tr>{rows}</table>",
            "<h3>furthest apart</h3><table><tr><th>decision</th><th>question</th><th>cell</th>"
            f"<th>a</th><th>b</th><th>|Δp|</th></tr>{worst}</table>"]


def render_html(
    doc: Mapping[str, Any],
    rows: Sequence[QuestionRow],
    calibrated: Sequence[QuestionRow] | None = None,
) -> str:
    """The whole report page; ``rows`` (and ``calibrated`` rows) feed the plots."""
    run = doc["run"]
    flags = {c: d["flags"] for c, d in doc["diagnostics"]["cells"].items()}
    flagged = "".join(
        f"<li>cell {escape(f['cell'])}: {escape(f['flag'])} {f['count']}/{f['total']} "
        f"({pct(f['rate'])} against {pct(f['others_rate'])} in the other cells, "
        f"p = {f['p_value']:.2g})</li>"
        for f in doc["diagnostics"]["flagged"])
    body = [
        f"<h1>dreads report: {escape(run['name'])}</h1>",
        *_identity(doc),
        _plots(rows, calibrated),
        *_figure_sections(doc, flags),
        "<h2>diagnostics per cell</h2>", _diag_table(doc["diagnostics"]),
        f'<ul class="flags">{flagged}</ul>' if flagged else "",
        *_reasons(doc),
        *(_against_section(doc) if doc["against"] else []),
    ]
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>dreads report {escape(run['name'])}</title><style>{_CSS}</style></head>"
            "<body>" + "".join(body) + "</body></html>\n")
