"""The comparison on the HTML page (``report A --against B --html``), at the top of the page:
the verdict lines, the confound line, the noise floor, both runs' settings (differing first),
one table per question (overall and per cell) and where the answers differ per cell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from app.report.compare_text import (
    CELL_HEAD,
    SETTINGS_HEAD,
    cell_rows,
    noise_lines,
    settings_rows,
    title_line,
    verdict_lines,
)
from app.report.html_tables import html_row, html_table
from app.report.tables import fmt, pct

__all__ = ["against_section"]


def _table(head: Sequence[str], rows: Sequence[tuple[Sequence[str], str]],
           table_id: str = "") -> str:
    return html_table(head, [html_row(cells, cls) for cells, cls in rows], table_id)


def _disagreement(dis: Mapping[str, Any]) -> str:
    rows = [([c, fmt(t["both_answered"]), f"{t['differ']} ({pct(t['differ_rate'])})",
              fmt(t["mean_distance"]), fmt(t["max_distance"])],
             "overall" if c == "overall" else "")
            for c, t in [*dis["cells"].items(), ("overall", dis["overall"])]]
    return ("<h3>where a and b disagree, per cell</h3>"
            + _table(["cell", "both answered", "other answer", "mean |ΔP|", "max |ΔP|"], rows))


def against_section(doc: Mapping[str, Any]) -> list[str]:
    """The comparison section of the page; [] without ``--against``."""
    cmp = doc.get("against")
    if not cmp:
        return []
    settings = cmp["settings"]
    confound = len(settings["differ"]) > 1
    verdicts = "".join(f'<li class="{"real" if real else ""}">{escape(line)}</li>'
                       for line, real in verdict_lines(cmp))
    noise = "".join(f"<li>{escape(line)}</li>" for line in noise_lines(cmp))
    out = [
        '<section id="comparison"><h2>comparison with another run</h2>',
        f'<p class="note">{escape(title_line(cmp))}</p>',
        f'<p class="{"flags" if confound else "note"}">{escape(settings["note"])}</p>',
        f'<ul class="verdicts">{verdicts}</ul>',
        f'<p class="note">p-values: {escape(cmp["correction"])}. "detects |Δ| ≥": the smallest '
        "difference this comparison finds 4 times in 5 (80% power).</p>",
        f'<ul class="note">{noise}</ul>',
    ]
    for qid, section in cmp["questions"].items():
        rows = [(cells, ("overall " if cells[0] == "overall" else "") + ("flag" if real else ""))
                for cells, real in cell_rows(section)]
        out += [f"<h3>{escape(qid)} ({escape(section['kind'])}, {section['n']} answered by "
                f"both): {escape(cmp['a'])} (a) against {escape(cmp['b'])} (b)</h3>",
                _table(CELL_HEAD, rows, f"compare-{qid}")]
    for kind, section in (cmp.get("pooled") or {}).items():
        rows = [(cells, "flag" if real else "")
                for cells, real in cell_rows({**section, "kind": kind, "cells": {}})]
        out += [f"<h3>{escape(kind)} POOLED over {escape(', '.join(section['questions']))} "
                f"({section['n']} answered by both)</h3>",
                _table(CELL_HEAD, rows, f"compare-pooled-{kind}")]
    out += ["<h3>settings, differing first</h3>",
            _table(SETTINGS_HEAD, [(cells, "flag" if differs else "")
                                   for cells, differs in settings_rows(cmp)], "settings")]
    if cmp.get("disagreement"):
        out.append(_disagreement(cmp["disagreement"]))
    out.append("</section>")
    return out
