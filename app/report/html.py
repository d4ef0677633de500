"""One self-contained HTML report page, for the person who reads it: inline CSS, plots as PNG
data URLs, nothing fetched, no script.

In reading order: with ``--against`` the comparison (``compare_html``: verdicts, settings, per-cell
tables per question), the headline (who answered, the field report's figures with their counts),
the lists a reviewer opens the report for (missed positives, top false positives, with
``--against`` the most disagreeing questions), the plots on one grid, the tables per cell,
and a glossary of every figure and flag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from app.engine import SIMULATOR_NOTE
from app.images import ImagePolicy
from app.report.compare_html import against_section
from app.report.families import has_binary
from app.report.figure_text import partial_line
from app.report.glossary import glossary
from app.report.headline import HeadlineItem, headline_items, identity_items
from app.report.html_tables import (
    diagnostics_table,
    figure_tables,
    reasons_table,
    review_lists,
    spend_table,
)
from app.report.labels import run_identity
from app.report.load import QuestionRow
from app.report.plots import Plot, report_plots
from app.report.spend import spend_note
from app.report.tables import pct
from app.report.thumbnails import review_thumbnails

__all__ = ["render_html"]

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:0 auto;padding:20px 24px;color:#222;
max-width:1200px;line-height:1.4}
h1{font-size:22px;margin:0 0 6px}h2{font-size:18px;margin:30px 0 8px;
border-bottom:1px solid #ccc}h3{font-size:15px;margin:18px 0 6px}
.sim{background:#fff3cd;border:2px solid #c90;padding:8px 12px;font-weight:bold}
.note{color:#555;font-size:13px;margin:4px 0}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(200px,1fr));gap:10px;
margin:10px 0}
.card{border:1px solid #d8d8d8;border-radius:6px;padding:8px 12px;background:#fafafa}
.card .t{font-size:12px;color:#555}.card .v{font-size:18px;font-weight:600;
overflow-wrap:anywhere}.card .n{font-size:11px;color:#666;margin-top:2px}
.cards.identity{grid-template-columns:repeat(auto-fill,minmax(160px,1fr))}
.identity .card{background:#fff}.identity .card .v{font-size:14px}
table{border-collapse:collapse;font-size:13px;margin:6px 0 12px;width:100%}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right;vertical-align:top;
overflow-wrap:break-word}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
td:first-child{white-space:nowrap}.list td:last-child{overflow-wrap:anywhere}
.list td,.list th{text-align:left}.list td:nth-child(4),.list td:nth-child(5){text-align:right}
tr.flag td{background:#fde8e8}tr.overall td{font-weight:bold}
.flags{color:#b00;font-weight:bold}ul.verdicts li.real{font-weight:bold}
.plots{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:14px}
.plots figure{margin:0;border:1px solid #e3e3e3;border-radius:6px;padding:8px}
.plots img{width:100%;height:auto;display:block}
.plots figcaption{font-size:13px;color:#444}
dl.glossary{display:grid;grid-template-columns:max-content 1fr;gap:4px 14px;font-size:13px}
dl.glossary dt{font-weight:600}dl.glossary dd{margin:0}
.list td.images{white-space:normal}.thumb{max-width:96px;max-height:96px;margin:0 4px 4px 0;
border:1px solid #ccc}.imgref{font-size:12px;overflow-wrap:anywhere}
"""


def _card(item: HeadlineItem) -> str:
    return (f'<div class="card" data-figure="{item.key}"><div class="t">{escape(item.title)}'
            f'</div><div class="v">{escape(item.value)}</div>'
            + (f'<div class="n">{escape(item.note)}</div>' if item.note else "") + "</div>")


def _flagged(doc: Mapping[str, Any]) -> str:
    items = "".join(
        f"<li>cell {escape(f['cell'])}: {escape(f['flag'])} {f['count']}/{f['total']} "
        f"({pct(f['rate'])} against {pct(f['others_rate'])} in the other cells, "
        f"p = {f['p_value']:.2g})</li>"
        for f in doc["diagnostics"]["flagged"])
    return f'<ul class="flags">{items}</ul>' if items else ""


def _headline(doc: Mapping[str, Any]) -> str:
    h = doc["headline"]
    identity = "".join(_card(i) for i in identity_items(h))
    figures = "".join(_card(i) for i in headline_items(h))
    labelled = doc["labelled"]
    summary = (f"{labelled['questions']} question(s), {labelled['with_expected']} with an "
               "expected label; [low, high]: 95% interval over items (the glossary names each "
               "method)" + ("; with replicates, each question's answer is the mean over them "
                            "and ±sd is the draw noise across replicates"
                            if doc["run"]["replicates"] > 1 else ""))
    if not labelled["with_expected"]:
        summary += ("; no question has an expected label: add \"expected\" to the job lines "
                    "to get the evaluation figures")
    return (f'<section id="headline"><div class="cards identity">{identity}</div>'
            f'<p class="note">{escape(summary)}</p>'
            f'<div class="cards figures">{figures}</div>{_flagged(doc)}</section>')


def _plot(plot: Plot) -> str:
    return (f'<figure><img alt="{escape(plot.title)}" src="{plot.data_url}">'
            f"<figcaption><b>{escape(plot.title)}</b>. {escape(plot.caption)}</figcaption>"
            "</figure>")


def _glossary(params: Mapping[str, Any]) -> str:
    items = "".join(f"<dt>{escape(term)}</dt><dd>{escape(text)}</dd>"
                    for term, text in glossary(params))
    return f'<section id="glossary"><h2>glossary</h2><dl class="glossary">{items}</dl></section>'


def _top(doc: Mapping[str, Any]) -> list[str]:
    run = doc["run"]
    out = [f"<h1>dreads report: {escape(run['name'])}</h1>"]
    if doc.get("partial"):
        out.append(f'<p class="sim partial">{escape(partial_line(doc["partial"]))}</p>')
    if run.get("simulator"):
        out.append(f'<p class="sim">{escape(SIMULATOR_NOTE)}.</p>')
    return [*out, *against_section(doc), _headline(doc)]


def _details(doc: Mapping[str, Any]) -> list[str]:
    flags = {c: d["flags"] for c, d in doc["diagnostics"]["cells"].items()}
    out = ['<h2 id="per-cell">figures per cell</h2>', *figure_tables(doc, flags),
           "<h2>diagnostics per cell</h2>", diagnostics_table(doc["diagnostics"])]
    if doc.get("reasons"):
        out += ["<h2>why decisions failed or were rejected</h2>", reasons_table(doc["reasons"])]
    if doc.get("spend"):
        out += ['<h2 id="spend">spend</h2>', spend_table(doc["spend"]),
                f'<p class="note">{escape(spend_note(doc["spend"]))}</p>']
    lines = "<br>".join(escape(line) for line in run_identity(doc["run"]))
    return [*out, f'<h2>the run</h2><p class="note">{lines}</p>']


def render_html(
    doc: Mapping[str, Any],
    rows: Sequence[QuestionRow],
    calibrated: Sequence[QuestionRow] | None = None,
    *,
    images: ImagePolicy | None = None,
) -> str:
    """The whole report page; ``rows`` (and ``calibrated`` rows) feed the plots. The listed
    questions of a decision with images show them as thumbnails, fetched now under
    ``images`` (by default: no local file), or as their references when they cannot be."""
    has_lists = has_binary(doc) or bool(doc["against"])
    thumbnails = review_thumbnails(doc, rows, images or ImagePolicy()) if has_lists else {}
    body = [
        *_top(doc),
        *(['<h2 id="review">what to review</h2>', review_lists(doc, thumbnails)]
          if has_lists else []),
        '<h2>plots</h2><div class="plots" id="plots">'
        + "".join(_plot(p) for p in report_plots(
            rows, calibrated, doc["headline"]["ece"]["calibrated_by"])) + "</div>",
        *_details(doc),
        _glossary(doc["params"]),
    ]
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>dreads report {escape(doc['run']['name'])}</title><style>{_CSS}</style>"
            "</head><body>" + "".join(body) + "</body></html>\n")
