"""The comparison in the terminal (``dreads report A --against B``): printed before run A's
report. Title, the confound line, one verdict line per question and figure, the noise floor,
both runs' settings (differing first), one table per question (overall and per cell), and
where the two runs' answers differ."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from app.report.compare_text import (
    CELL_HEAD,
    SETTINGS_HEAD,
    cell_rows,
    noise_lines,
    settings_rows,
    title_line,
    verdict_lines,
)
from app.report.tables import fmt, pct

__all__ = ["against_view"]


def _settings_table(cmp: Mapping[str, Any]) -> Table:
    table = Table(title=f"settings: {cmp['a']} (a) and {cmp['b']} (b), differing first",
                  title_justify="left")
    for name in SETTINGS_HEAD:
        table.add_column(name, overflow="fold")
    for cells, differs in settings_rows(cmp):
        table.add_row(*(escape(c) for c in cells), style="bold" if differs else None)
    return table


def _question_table(qid: str, section: Mapping[str, Any], cmp: Mapping[str, Any]) -> Table:
    table = Table(title=f"{qid} ({section['kind']}, {section['n']} answered by both): "
                        f"{cmp['a']} (a) against {cmp['b']} (b)", title_justify="left")
    for name in CELL_HEAD:
        table.add_column(name, justify="left" if name in ("cell", "figure", "better")
                         else "right", no_wrap=name != "better")
    for cells, real in cell_rows(section):
        table.add_row(*(escape(c) for c in cells), style="bold" if real else None)
    return table


def _disagreement_tables(dis: Mapping[str, Any]) -> list[RenderableType]:
    table = Table(title="where a and b disagree (questions both answered)",
                  title_justify="left")
    for title in ("cell", "both answered", "other answer", "mean |Δp|", "max |Δp|"):
        table.add_column(title, justify="left" if title == "cell" else "right", no_wrap=True)
    for cell, t in [*dis["cells"].items(), ("overall", dis["overall"])]:
        table.add_row(escape(cell), fmt(t["both_answered"]),
                      f"{t['differ']} ({pct(t['differ_rate'])})",
                      fmt(t["mean_distance"]), fmt(t["max_distance"]))
    largest = Table(title="furthest apart (|Δp|: total variation distance of the answers' "
                          "probabilities)", title_justify="left")
    for title in ("decision", "question", "cell", "a", "b", "|Δp|"):
        largest.add_column(title, overflow="fold")
    for row in dis["largest"]:
        largest.add_row(escape(str(row["decision"])), escape(str(row["question"])),
                        escape(str(row["cell"])), escape(str(row["a"])), escape(str(row["b"])),
                        fmt(row["distance"]))
    return [table, largest] if dis["largest"] else [table]


def against_view(doc: Mapping[str, Any]) -> list[RenderableType]:
    """Everything of ``doc["against"]`` the terminal prints, in reading order."""
    cmp = doc["against"]
    settings = cmp["settings"]
    parts: list[RenderableType] = [
        Text(title_line(cmp), style="bold"),
        Text(settings["note"], style="bold yellow" if len(settings["differ"]) > 1 else ""),
    ]
    parts += [Text(line, style="bold" if real else "") for line, real in verdict_lines(cmp)]
    parts.append(Text(f"p-values: {cmp['correction']}; 'detects |Δ| ≥': the smallest "
                      "difference this comparison finds 4 times in 5 (80% power)"))
    parts += [Text(line) for line in noise_lines(cmp)]
    parts.append(_settings_table(cmp))
    parts += [_question_table(qid, section, cmp) for qid, section in cmp["questions"].items()]
    parts += [_question_table(f"{kind} POOLED over {', '.join(section['questions'])}",
                              {**section, "kind": kind, "cells": {}}, cmp)
              for kind, section in (cmp.get("pooled") or {}).items()]
    if cmp.get("disagreement"):
        parts += _disagreement_tables(cmp["disagreement"])
    parts.append(Text(f"the report of {cmp['a']} (a) follows", style="bold"))
    return parts
