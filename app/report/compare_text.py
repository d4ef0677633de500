"""The comparison's words and numbers, shared by the terminal (``compare_tables``) and the HTML
page (``compare_html``): the title line, the verdict lines, the noise floor lines and the rows
of the per-cell tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.report.compare import Compared, compared_of
from app.report.compare import num_text as _num

__all__ = ["CELL_HEAD", "SETTINGS_HEAD", "cell_rows", "compared_of", "noise_lines",
           "settings_rows", "title_line", "verdict_lines"]

CELL_HEAD = ("cell", "figure", "a", "b", "Δ (a-b)", "95% interval", "p (Holm)", "better",
             "detects |Δ| ≥")
SETTINGS_HEAD = ("setting", "a", "b", "")


def _p(value: Any) -> str:
    if value is None:
        return "-"
    return "< 0.001" if value < 0.001 else f"{value:.2g}"


def title_line(cmp: Mapping[str, Any]) -> str:
    """Which runs, how many questions matched."""
    return (f"comparison: {cmp['a']} (a) against {cmp['b']} (b): {cmp['matched']} matched "
            f"question(s) (decision and question id), {cmp['only_a']} only in a, "
            f"{cmp['only_b']} only in b; replicates averaged per question first")


def verdict_lines(cmp: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """("question: verdict", real) per question and figure, in order."""
    return [(f"{v['question']}: {v['text']}", bool(v["real"])) for v in cmp["verdicts"]]


def noise_lines(cmp: Mapping[str, Any]) -> list[str]:
    """The noise floor beside the run difference, per question and figure; one line saying
    why there is none without replicates in both runs."""
    floor = cmp.get("noise_floor")
    if not floor:
        return [f"noise floor: none (it needs replicates in both runs: run {cmp['a']} and "
                f"{cmp['b']} with --replicates 3 or more to see how far a run moves between "
                "noise draws)"]
    out = []
    for qid, figures in floor.items():
        section = cmp["questions"].get(qid)
        if section is None:
            continue
        for c in compared_of(section["kind"]):
            f = figures.get(c.key)
            diff = section["overall"][c.key]["diff"]
            if f is None or f["largest_within"] is None:
                continue
            d = c.digits
            out.append(
                f"{qid}: {c.symbol} between replicates: sd {_num(f['sd_a'], d)} ({cmp['a']}), "
                f"{_num(f['sd_b'], d)} ({cmp['b']}), largest replicate-to-replicate "
                f"difference {_num(f['largest_within'], d)}; between the runs "
                f"{_num(diff, d, sign=True)}")
    return out


def _better(pair: Mapping[str, Any]) -> str:
    """The better run's name where the difference is real (adjusted p < ``ALPHA``)."""
    verdict = pair.get("verdict") or {}
    return str(verdict["better"]) if verdict.get("real") else "-"


def _interval(pair: Mapping[str, Any], digits: int) -> str:
    i = pair["interval"]
    if i["low"] is None or i["high"] is None:
        return "-"
    return f"[{_num(i['low'], digits, sign=True)}, {_num(i['high'], digits, sign=True)}]"


def _pair_row(label: str, c: Compared, pair: Mapping[str, Any]) -> list[str]:
    d = c.digits
    return [label, c.symbol, _num(pair["a"], d), _num(pair["b"], d),
            _num(pair["diff"], d, sign=True), _interval(pair, d), _p(pair["p_adjusted"]),
            _better(pair), _num(pair["detectable"], d)]


def cell_rows(section: Mapping[str, Any]) -> list[tuple[list[str], bool]]:
    """Rows of one question's comparison table (``CELL_HEAD``): overall, then each cell, each
    compared figure; with whether the row's difference is real."""
    out = []
    for label, block in [("overall", section["overall"]), *section["cells"].items()]:
        for c in compared_of(section["kind"]):
            pair = block[c.key]
            out.append((_pair_row(label, c, pair), bool((pair.get("verdict") or {})
                                                        .get("real"))))
    return out


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def settings_rows(cmp: Mapping[str, Any]) -> list[tuple[list[str], bool]]:
    """Rows of the settings table (``SETTINGS_HEAD``), differing first; with whether the row
    differs."""
    return [([r["name"], _value(r["a"]), _value(r["b"]), "differs" if r["differs"] else ""],
             bool(r["differs"])) for r in cmp["settings"]["rows"]]
