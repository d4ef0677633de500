"""The HTML tables of a report page: the reviewer's lists, figures per cell, diagnostics,
calibration per question, the failure reasons (the comparison's: ``compare_html``).

Every table fits the page: cells wrap, and the yes/no figures come as two tables (ranking,
thresholds) as in the terminal. Rates carry their counts ("1 (24/24)", "0 (0.00%)").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from app.engine import Family, all_kinds
from app.report.families import has_binary, view_of
from app.report.figure_text import partial_line
from app.report.labels import (
    column_titles,
    thresholds,
)
from app.report.spend import SPEND_COLUMNS, spend_rows
from app.report.tables import block_cells, fmt, p_text, pct, read_failed

__all__ = ["diagnostics_table", "figure_tables", "html_row", "html_table", "infrastructure_list",
           "reasons_table", "review_lists", "spend_table"]


def html_row(cells: Sequence[str], cls: str = "") -> str:
    """One ``<tr>`` of escaped cells, with a class when given."""
    attr = f' class="{cls}"' if cls else ""
    return f"<tr{attr}>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"


def html_table(head: Sequence[str], rows: Sequence[str], table_id: str = "") -> str:
    """A table of escaped column heads and ``html_row`` rows, with an id when given."""
    attr = f' id="{escape(table_id)}"' if table_id else ""
    heads = "".join(f"<th>{escape(c)}</th>" for c in head)
    return f"<table{attr}><thead><tr>{heads}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _item_cells(item: Mapping[str, Any]) -> list[str]:
    decision = str(item["decision"]) + (f" (replicate {item['replicate']})"
                                        if item.get("replicate") else "")
    return [decision, str(item["question"]), str(item["cell"]), p_text(item["p_yes"]),
            p_text(item["label_mass"]), str(item["state"])]


#: (decision, replicate) -> the HTML of its images' thumbnails (``app.report.thumbnails``)
Thumbnails = Mapping[tuple[str, int], str]


def _image_row(item: Mapping[str, Any], thumbnails: Thumbnails) -> str:
    """A listed question's row with its images last: thumbnails, or the references as text."""
    key = (str(item["decision"]), int(item.get("replicate") or 0))
    shown = thumbnails.get(key)
    if shown is None:
        shown = "<br>".join(escape(ref) for ref in item.get("images") or ())
    return html_row(_item_cells(item))[:-len("</tr>")] + f'<td class="images">{shown}</td></tr>'


def _list(list_id: str, title: str, listed: Mapping[str, Any], empty: str,
          thumbnails: Thumbnails) -> str:
    total, items = listed["total"], listed["items"]
    shown = f"{total}" if len(items) == total else f"the top {len(items)} of {total}"
    head = f'<h3>{escape(title)}: {shown}</h3>'
    if not items:
        return f'<section class="list" id="{list_id}">{head}<p class="note">{escape(empty)}' \
               "</p></section>"
    names = ["id", "question", "cell", "P", "label mass", "state (first words)"]
    if any(i.get("images") for i in items):
        rows = [_image_row(i, thumbnails) for i in items]
        names.append("images")
    else:
        rows = [html_row(_item_cells(i)) for i in items]
    return f'<section class="list" id="{list_id}">{head}{html_table(names, rows)}</section>'


def review_lists(doc: Mapping[str, Any], thumbnails: Thumbnails | None = None) -> str:
    """Every missed positive and the top false positives (with their images' ``thumbnails``);
    the most disagreeing questions."""
    t = thresholds(doc["params"])
    lists = doc["review"]
    thumbs = thumbnails or {}
    parts = [] if not has_binary(doc) else [
        _list("missed-positives", f"missed positives (P(yes) ≤ {t['r']}, lowest first)",
              lists["missed_positives"], f"No missed positive: every answered positive has "
              f"P(yes) above {t['r']}.", thumbs),
        _list("false-positives", f"false positives (P(yes) > {t['f']}, highest first)",
              lists["false_positives"], f"No false positive: no answered negative has P(yes) "
              f"above {t['f']}.", thumbs),
    ]
    if doc.get("against"):
        parts.append(_disagreeing(doc["against"]))
    return "".join(parts)


def _disagreeing(cmp: Mapping[str, Any]) -> str:
    items = cmp["disagreement"]["largest"]
    title = (f"most disagreeing questions: {escape(cmp['a'])} (a) against "
             f"{escape(cmp['b'])} (b), largest |ΔP| first")
    rows = [html_row([str(r["decision"]), str(r["question"]), str(r["cell"]),
                  f"{r['a']} ({p_text(r.get('p_yes_a'))})",
                  f"{r['b']} ({p_text(r.get('p_yes_b'))})",
                  p_text(r["distance"]), str(r.get("state", ""))]) for r in items]
    table = html_table(["id", "question", "cell", "a (P)", "b (P)", "|ΔP|", "state (first words)"],
                   rows) if rows else '<p class="note">No question answered by both runs.</p>'
    return f'<section class="list" id="disagreements"><h3>{title}</h3>{table}</section>'


def _cell_table(section: Mapping[str, Any], columns: Mapping[str, str],
                params: Mapping[str, Any], flags: Mapping[str, list[str]],
                family: Family) -> str:
    names = list(columns)
    rows = []
    for cell, block in section["cells"].items():
        cell_flags = flags.get(cell) or []
        label = cell + (" ⚑ " + ", ".join(cell_flags) if cell_flags else "")
        rows.append(html_row([label, *block_cells(block, names, family, params)],
                         "flag" if cell_flags else ""))
    rows.append(html_row(["overall", *block_cells(section["overall"], names, family, params)],
                     "overall"))
    return html_table(["cell", *column_titles(columns, params)], rows)


def _question_table(kind_section: Mapping[str, Any], columns: Mapping[str, str],
                    params: Mapping[str, Any], family: Family) -> str:
    names = list(columns)
    rows = [html_row([qid, *block_cells(sec["overall"], names, family, params)])
            for qid, sec in kind_section["questions"].items()]
    if kind_section.get("pooled"):
        rows.append(html_row(["all questions (pooled)",
                          *block_cells(kind_section["pooled"]["overall"], names, family,
                                       params)], "overall"))
    return html_table(["question", *column_titles(columns, params)], rows)


def _partial_note(doc: Mapping[str, Any]) -> str:
    line = partial_line(doc.get("partial"))
    return f'<p class="note partial">{escape(line)}</p>' if line else ""


def figure_tables(doc: Mapping[str, Any], flags: Mapping[str, list[str]]) -> list[str]:
    """Figures per question, then per cell of each question, of each question type (raw, then
    calibrated); calibration per question. Every figure with its 95% interval."""
    out: list[str] = [_partial_note(doc)] if doc.get("partial") else []
    params = doc["params"]
    for kind in all_kinds():
        if not doc["labelled"].get(kind.name):
            continue
        name, title, fam = kind.name, escape(kind.title), kind.family
        raw, parts = doc["raw"][name], view_of(kind).parts
        out.append(f"<h3>{title} per question</h3>")
        out += [_question_table(raw, cols, params, fam) for _, cols in parts]
        sections = [*raw["questions"].items(),
                    *([("all questions (pooled)", raw["pooled"])] if raw.get("pooled") else [])]
        for qid, sec in sections:
            out.append(f"<h3>{title} {escape(qid)} per cell</h3>")
            out += [_cell_table(sec, cols, params, flags, fam) for _, cols in parts]
        if fam is Family.BINARY and doc["calibrated"]:
            for qid, sec in doc["calibrated"][name]["questions"].items():
                out.append(f"<h3>{title} {escape(qid)} per cell, calibrated</h3>")
                out.append(_cell_table(sec, parts[-1][1], params, flags, fam))
        if fam is Family.BINARY:
            out += [f"<h3>calibration per question ({title})</h3>", _calibration_table(doc)]
    return out


def _calibration_table(doc: Mapping[str, Any]) -> str:
    raw = doc["raw"]["calibration"]
    cal = doc["calibrated"]["calibration"] if doc["calibrated"] else None
    head = ["question", "n", "yes", "AUC", "ECE", "Brier",
            *(["ECE calibrated", "Brier calibrated"] if cal else [])]
    rows = []
    overall = "all (pooled)" if (raw["overall"] or {}).get("pooled") else "overall"
    pool = [(overall, raw["overall"])] if raw["overall"] else []
    for qid, c in [*raw["questions"].items(), *pool]:
        extra = []
        if cal:
            cq = cal["overall"] if qid == overall else cal["questions"][qid]
            extra = [fmt(cq["ece"]), fmt(cq["brier"])]
        rows.append(html_row([qid, fmt(c["n"]), fmt(c["positives"]), fmt(c["auc"]), fmt(c["ece"]),
                          fmt(c["brier"]), *extra], "overall" if qid == overall else ""))
    return html_table(head, rows)


def _count_rate(count: int, rate: float | None) -> str:
    return f"{count} ({pct(rate)})"


def _diag_cells(d: Mapping[str, Any]) -> list[str]:
    return [
        fmt(d["questions"]), _count_rate(d["unanswered"], d["unanswered_rate"]),
        fmt(d["in_flight"]), read_failed(d),
        f"{d['failed_attempts']}/{d['attempts']}: "
        + (", ".join(f"{k} {v}" for k, v in d["failures"].items()) or "-"),
        _count_rate(d["low_mass_draws"], d["low_mass_share"]),
        _count_rate(d["argmax_not_label_draws"], d["argmax_not_label_share"]),
        fmt(d["draws_mean"]),
        ", ".join(f"{k} {v}" for k, v in d["stop_reasons"].items()) or "-",
        f"{fmt(d['stderr']['p50'])}, {fmt(d['stderr']['p90'])}",
    ]


def infrastructure_list(infra: Mapping[str, Any] | None) -> str:
    """What the infrastructure did to the run, an item each (``app.store.infrastructure``'s
    words, as ``dreads status`` says them): never a cell's."""
    lines = (infra or {}).get("lines") or []
    if not lines:
        return '<p class="note">none: no attempt was ended by the infrastructure</p>'
    items = "".join(f"<li>{escape(line)}</li>" for line in lines)
    return f'<ul class="infrastructure">{items}</ul>'


def diagnostics_table(diag: Mapping[str, Any]) -> str:
    """Per cell: unanswered, failures by kind, low label mass, argmax, draws, stderr."""
    rows = []
    for cell, d in [*diag["cells"].items(), ("overall", diag["overall"])]:
        label = cell + (" ⚑ " + ", ".join(d["flags"]) if d["flags"] else "")
        cls = "flag" if d["flags"] else ("overall" if cell == "overall" else "")
        rows.append(html_row([label, *_diag_cells(d)], cls))
    return html_table(["cell", "questions", "unanswered", "in flight", "read failed (decisions)",
                   "failed attempts (the read's)",
                   "label mass <0.5", "argmax≠label", "draws mean", "stop reasons",
                   "stderr p50, p90"], rows)


def reasons_table(reasons: Sequence[Mapping[str, Any]]) -> str:
    """Why decisions failed or were rejected, counted, with an example each."""
    rows = [html_row([r["kind"], str(r["count"]), r["example"]]) for r in reasons]
    return html_table(["kind", "decisions", "reason (an example)"], rows)


def spend_table(section: Mapping[str, Any]) -> str:
    """What the run cost, in total and per cell (``app.report.spend``)."""
    return html_table(SPEND_COLUMNS, [html_row(r) for r in spend_rows(section)], "spend")
