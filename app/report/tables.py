"""Rich tables of a report document (``build_report``'s dict): what ``dreads report`` prints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from app.engine import SIMULATOR_NOTE, Family, QuestionKind, all_kinds
from app.report.families import has_binary, view_of
from app.report.figure_text import cell_text, num, partial_line
from app.report.headline import headline_items
from app.report.labels import (
    column_titles,
    run_identity,
    thresholds,
)
from app.report.spend import SPEND_COLUMNS, spend_note, spend_rows

__all__ = [
    "block_cells",
    "diagnostics_tables",
    "fmt",
    "headline_table",
    "infrastructure_view",
    "p_text",
    "pct",
    "read_failed",
    "reasons_table",
    "report_view",
    "review_tables",
]

#: how every table's intervals read
INTERVALS_NOTE = ("[low, high]: 95% interval over items (AUC: DeLong; k/n rates: Wilson; ECE, "
                  "Brier, accuracy, MAE, log loss: bootstrap over decisions; median rank: order "
                  "statistic); counts and the worst rank have none")


def fmt(value: Any, std: Any = None) -> str:
    """A figure as text: ints plain, floats to 4 significant digits, ``± std`` when given."""
    if value is None:
        return "-"
    text = num(value)
    # A spread of exactly 0 (counts, or figures every replicate agrees on) is left out.
    return f"{text} ± {std:.2g}" if isinstance(std, float) and std != 0.0 else text


def block_cells(block: Mapping[str, Any], names: Sequence[str], family: Family,
                params: Mapping[str, Any] | None = None) -> list[str]:
    """The figures ``names`` of a block as table text: ``value [low, high]``, rates with their
    counts (``figure_text.cell_text``)."""
    return [cell_text(family, n, block, params) for n in names]


def _pooled(title: str, block: Mapping[str, Any]) -> str:
    return f"{title} (pooled over questions)" if block.get("pooled") else title


def cell_table(title: str, section: Mapping[str, Any], columns: Mapping[str, str],
               params: Mapping[str, Any], flags: Mapping[str, list[str]] | None = None,
               family: Family = Family.BINARY) -> Table:
    """Rows = cells then ``overall``; columns = figures."""
    table = Table(title=_pooled(title, section["overall"]), title_justify="left")
    table.add_column("cell", no_wrap=True)
    for t in column_titles(columns, params):
        table.add_column(t, justify="right")
    names = list(columns)
    for cell, block in section["cells"].items():
        mark = " [red]⚑[/red]" if flags and flags.get(cell) else ""
        table.add_row(escape(cell) + mark, *block_cells(block, names, family, params))
    table.add_row(Text("overall", style="bold"),
                  *block_cells(section["overall"], names, family, params))
    return table


def question_table(title: str, kind_section: Mapping[str, Any], columns: Mapping[str, str],
                   params: Mapping[str, Any], family: Family) -> Table:
    """Rows = questions (then all questions pooled, when asked for); columns = figures."""
    table = Table(title=title, title_justify="left")
    table.add_column("question", no_wrap=True)
    for t in column_titles(columns, params):
        table.add_column(t, justify="right")
    names = list(columns)
    for qid, sec in kind_section["questions"].items():
        table.add_row(escape(qid), *block_cells(sec["overall"], names, family, params))
    if kind_section.get("pooled"):
        table.add_row(Text("all (pooled)", style="bold"),
                      *block_cells(kind_section["pooled"]["overall"], names, family, params))
    return table


def figure_table(title: str, blocks: Mapping[str, Mapping[str, Any]],
                 columns: Mapping[str, str], params: Mapping[str, Any],
                 diff: Mapping[str, Any] | None = None,
                 family: Family = Family.BINARY) -> Table:
    """Rows = figures; one column per block (raw, calibrated / run A, run B), then Δ."""
    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    for name in blocks:
        table.add_column(name, justify="right")
    if diff is not None:
        table.add_column("Δ (a-b)", justify="right")
    for name, t in zip(columns, column_titles(columns, params), strict=True):
        row = [cell_text(family, name, b, params) for b in blocks.values()]
        table.add_row(t, *row, *([fmt(diff.get(name))] if diff is not None else []))
    return table


def _calibration_table(doc: Mapping[str, Any]) -> Table:
    raw = doc["raw"]["calibration"]
    cal = doc["calibrated"]["calibration"] if doc["calibrated"] else None
    table = Table(title="calibration per question (yes/no)", title_justify="left")
    names = ["question", "n", "yes", "ECE", "Brier", *(["ECE cal", "Brier cal"] if cal else [])]
    for name in names:
        table.add_column(name, justify="left" if name == "question" else "right")
    overall = "all (pooled)" if (raw["overall"] or {}).get("pooled") else "overall"
    items = [*raw["questions"].items(), *([(overall, raw["overall"])] if raw["overall"] else [])]
    for q, c in items:
        extra = []
        if cal:
            cq = cal["overall"] if q == overall else cal["questions"][q]
            extra = [fmt(cq["ece"]), fmt(cq["brier"])]
        table.add_row(escape(q), fmt(c["n"]), fmt(c["positives"]), fmt(c["ece"]),
                      fmt(c["brier"]),
                      *extra)
    return table


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def diagnostics_tables(diag: Mapping[str, Any]) -> list[Table]:
    """Per cell: unanswered and failures by kind; then the draws (label mass, stop, stderr)."""
    rows = [*diag["cells"].items(), ("overall", diag["overall"])]
    lost = Table(title="unanswered and failures per cell (the read's)", title_justify="left")
    for name in ("cell", "questions", "unanswered", "in flight", "read failed",
                 "failed attempts", "flags"):
        lost.add_column(name, justify="left" if name in ("cell", "failed attempts", "flags")
                        else "right", no_wrap=name == "cell")
    reads = Table(title="draws per cell", title_justify="left")
    for name in ("cell", "draws", "mass<0.5", "argmax≠label", "draws mean", "stop reasons",
                 "stderr p50", "stderr p90"):
        reads.add_column(name, justify="left" if name in ("cell", "stop reasons") else "right",
                         no_wrap=name == "cell")
    for cell, d in rows:
        failures = ", ".join(f"{k} {v}" for k, v in d["failures"].items()) or "-"
        flags = ", ".join(d["flags"])
        lost.add_row(escape(cell), fmt(d["questions"]),
                     f"{d['unanswered']} ({pct(d['unanswered_rate'])})", fmt(d["in_flight"]),
                     read_failed(d), f"{d['failed_attempts']}/{d['attempts']}: {failures}",
                     Text(flags, style="bold red") if flags else "")
        reads.add_row(escape(cell), fmt(d["draw_rows"]), pct(d["low_mass_share"]),
                      pct(d["argmax_not_label_share"]), fmt(d["draws_mean"]),
                      ", ".join(f"{k} {v}" for k, v in d["stop_reasons"].items()) or "-",
                      fmt(d["stderr"]["p50"]), fmt(d["stderr"]["p90"]))
    return [lost, reads]


def _confusion(kind: QuestionKind, conf: Mapping[str, Any], qid: str = "") -> Table:
    table = Table(title=f"{kind.title} {qid} confusion".replace("  ", " "), title_justify="left",
                  caption="rows expected, columns answered", caption_justify="left")
    table.add_column("")
    for label in conf["labels"]:
        table.add_column(escape(label), justify="right")
    for label, row in zip(conf["labels"], conf["matrix"], strict=True):
        table.add_row(escape(label), *(str(v) for v in row))
    return table


def read_failed(d: Mapping[str, Any]) -> str:
    """Decisions the read failed of those it decided (what the read_failures flag tests)."""
    if "read_decisions" not in d:
        return "-"
    return f"{d['read_failed_decisions']}/{d['read_decisions']}"


def _flag_lines(diag: Mapping[str, Any]) -> list[RenderableType]:
    lines: list[RenderableType] = [
        Text(f"⚑ cell {f['cell']!r}: {f['flag']} {f['count']}/{f['total']} decisions "
             f"({pct(f['rate'])}) against {pct(f['others_rate'])} in the other cells "
             f"(p = {f['p_value']:.2g})", style="red") for f in diag["flagged"]]
    if lines and diag.get("flag_method"):
        lines.append(Text(f"flags: {diag['flag_method']}", style="dim"))
    return lines


def infrastructure_view(infra: Mapping[str, Any] | None) -> list[RenderableType]:
    """What the infrastructure did to the run, a line each (``app.store.infrastructure``'s
    words, as ``dreads status`` prints them): never a cell's."""
    head = Text("infrastructure (not counted against any cell):", style="bold")
    lines = (infra or {}).get("lines") or []
    if not lines:
        return [Text.assemble(head, " none")]
    return [head, *(Text(f"  {line}", style="yellow") for line in lines)]


def _typed_tables(doc: Mapping[str, Any], params: Mapping[str, Any],
                  flags: Mapping[str, list[str]]) -> list[RenderableType]:
    """Per kind: its figures per question (one row each), then per cell of each question."""
    out: list[RenderableType] = []
    labelled = doc["labelled"]
    for kind in all_kinds():
        if not labelled.get(kind.name):
            continue
        view, name, title, fam = view_of(kind), kind.name, kind.title, kind.family
        raw = doc["raw"][name]
        for part, cols in view.parts:
            out.append(question_table(f"{title} per question{part}", raw, cols, params, fam))
        sections = [*raw["questions"].items(),
                    *([("all questions", raw["pooled"])] if raw.get("pooled") else [])]
        for qid, sec in sections:
            for part, cols in view.parts:
                out.append(cell_table(f"{title} {qid} per cell{part}", sec, cols, params,
                                      flags, fam))
            if view.confusion and sec.get("confusion"):
                out.append(_confusion(kind, sec["confusion"], qid))
        if doc["calibrated"] and fam is Family.BINARY:
            cal = doc["calibrated"][name]
            for qid, sec in raw["questions"].items():
                blocks = {"raw": sec["overall"], "calibrated": cal["questions"][qid]["overall"]}
                out.append(figure_table(f"{title} {qid} overall: raw and calibrated", blocks,
                                        view.columns, params, family=fam))
                out.append(cell_table(f"{title} {qid} per cell, calibrated: thresholds",
                                      cal["questions"][qid], view.parts[-1][1], params,
                                      flags, fam))
    if has_binary(doc):
        out.append(_calibration_table(doc))
    return out


def _identity(doc: Mapping[str, Any]) -> list[RenderableType]:
    run = doc["run"]
    head = Text(f"run {run['name']}: {doc['labelled']['questions']} question(s), "
                f"{doc['labelled']['with_expected']} with an expected label", style="bold")
    parts: list[RenderableType] = [head]
    if run.get("simulator"):
        parts.append(Text(SIMULATOR_NOTE, style="bold yellow"))
    parts += [Text(line) for line in run_identity(run)]
    return parts


def reasons_table(reasons: Sequence[Mapping[str, Any]]) -> Table:
    """Why decisions failed or were rejected, grouped and counted, with an example each."""
    table = Table(title="why decisions failed or were rejected", title_justify="left")
    table.add_column("kind")
    table.add_column("decisions", justify="right")
    table.add_column("reason (an example)", overflow="fold")
    for r in reasons:
        table.add_row(escape(r["kind"]), str(r["count"]), escape(r["example"]))
    return table


def headline_table(h: Mapping[str, Any], title: str = "headline figures") -> Table:
    """The headline figures with their counts, one per line (the page's cards)."""
    table = Table(title=title, title_justify="left", box=None, show_header=False,
                  pad_edge=False, padding=(0, 3, 0, 2))
    table.add_column("figure", no_wrap=True)
    table.add_column("value", overflow="fold")
    for item in headline_items(h):
        table.add_row(escape(item.title), escape(item.text))
    return table


def p_text(value: float | None) -> str:
    """A probability to 3 decimals ("-" for None)."""
    return "-" if value is None else f"{value:.3f}"


def _listed_title(title: str, listed: Mapping[str, Any]) -> str:
    total, shown = listed["total"], len(listed["items"])
    return f"{title}: {total}" if shown == total else f"{title}: the top {shown} of {total}"


def _review_table(title: str, listed: Mapping[str, Any]) -> RenderableType:
    if not listed["items"]:
        return Text(_listed_title(title, listed))
    table = Table(title=_listed_title(title, listed), title_justify="left")
    images = any(i.get("images") for i in listed["items"])
    names = ("id", "question", "cell", "P", "label mass", "state (first words)")
    for name in (*names, "images") if images else names:
        table.add_column(name, justify="right" if name in ("P", "label mass") else "left",
                         overflow="fold")
    for i in listed["items"]:
        cells = [escape(str(i["decision"])), escape(str(i["question"])),
                 escape(str(i["cell"])), p_text(i["p_yes"]), p_text(i["label_mass"]),
                 escape(str(i["state"]))]
        if images:
            cells.append(escape("\n".join(i.get("images") or ())))
        table.add_row(*cells)
    return table


def review_tables(doc: Mapping[str, Any]) -> list[RenderableType]:
    """Every missed positive (lowest P(yes) first) and the top false positives (highest
    first), the lists of the HTML page."""
    if not has_binary(doc):
        return []
    t = thresholds(doc["params"])
    return [_review_table(f"missed positives (P(yes) ≤ {t['r']})",
                          doc["review"]["missed_positives"]),
            _review_table(f"false positives (P(yes) > {t['f']})",
                          doc["review"]["false_positives"])]


def spend_tables(section: Mapping[str, Any]) -> list[RenderableType]:
    """What the run cost (``app.report.spend``), and the prices under it."""
    table = Table(title="spend", title_justify="left")
    for name in SPEND_COLUMNS:
        table.add_column(name, justify="left" if name == "cell" else "right")
    for row in spend_rows(section):
        table.add_row(*(escape(c) for c in row))
    return [table, Text(spend_note(section))]


def report_view(doc: Mapping[str, Any]) -> Group:
    """Everything ``dreads report`` prints without ``--json``."""
    run, params = doc["run"], doc["params"]
    parts: list[RenderableType] = []
    if doc.get("partial"):
        parts.append(Text(partial_line(doc["partial"]), style="bold yellow"))
    if doc["against"]:  # the comparison first, then run A's report
        from app.report.compare_tables import against_view

        parts += against_view(doc)
    parts += _identity(doc)
    parts.append(Text(INTERVALS_NOTE))
    if run["replicates"] > 1:
        parts.append(Text(f"figures are of each question's answer averaged over the "
                          f"{run['replicates']} replicates; ±sd: draw noise (the figure's "
                          "standard deviation across replicates, each computed alone)"))
    if not doc["labelled"]["with_expected"]:
        parts.append(Text("no question has an expected label: add \"expected\" to the job lines "
                          "to get accuracy figures; diagnostics follow", style="yellow"))
    parts.append(headline_table(doc["headline"]))
    parts += review_tables(doc)
    flags = {c: d["flags"] for c, d in doc["diagnostics"]["cells"].items()}
    parts += _typed_tables(doc, params, flags)
    parts += diagnostics_tables(doc["diagnostics"])
    parts += infrastructure_view(doc.get("infrastructure"))
    if doc.get("reasons"):
        parts.append(reasons_table(doc["reasons"]))
    if doc.get("spend"):
        parts += spend_tables(doc["spend"])
    parts += _flag_lines(doc["diagnostics"])
    return Group(*parts)
