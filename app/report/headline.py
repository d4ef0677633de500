"""The headline of a report: who answered, and the field report's figures with their counts.

``headline`` gathers the figures from the parts of a report (the run, the overall figure
blocks, the diagnostics); ``headline_items`` words them, one ``HeadlineItem`` each. The
terminal report, the ``dreads run`` summary, the HTML page and the one line of ``--html`` all
print these items, so a reader sees the same numbers everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.engine import Family, all_kinds
from app.report.families import binary_kinds, view_of
from app.report.labels import thresholds

__all__ = ["LINE_KEYS", "HeadlineItem", "headline", "headline_items", "headline_line",
           "identity_items"]

#: the items of the one line ``dreads report --html`` prints
LINE_KEYS = ("auc", "recall", "top_share", "false_positives", "ece", "unanswered", "failed")


@dataclass(frozen=True)
class HeadlineItem:
    """One figure of the headline: a stable key, its title, its value with counts, and a note
    on how it was made (small print on the page, in parentheses elsewhere)."""

    key: str
    title: str
    value: str
    note: str = ""

    @property
    def text(self) -> str:
        """The value with its note, on one line."""
        return f"{self.value} ({self.note})" if self.note else self.value


def _identity(run: Mapping[str, Any]) -> dict[str, Any]:
    settings = run.get("settings") or {}
    policy = settings.get("policy")
    if policy == "fixed":
        policy = f"fixed {settings.get('fixed_draws')} draws"
    return {"run": run.get("name"), "model": settings.get("model"),
            "layout": settings.get("layout"), "mode": settings.get("read_mode"),
            "policy": policy, "max_draws": settings.get("max_draws"),
            "answered_by": f"{'dreads sim' if run.get('simulator') else run.get('engine')} at "
                           f"{run.get('upstream')}",
            "simulator": bool(run.get("simulator")), "replicates": run.get("replicates")}


def headline(run: Mapping[str, Any], params: Mapping[str, Any],
             overall: Mapping[str, Mapping[str, Any]], diag: Mapping[str, Any],
             calibrated_ece: float | None = None, *,
             calibrated_by: str | None = None) -> dict[str, Any]:
    """The headline as data: ``overall`` maps each kind's name (noul, choice, score, ...) to
    its overall figures; ``calibrated_by`` says where the calibrated ECE comes from (the
    yes/no kind's)."""
    out: dict[str, Any] = {
        "identity": _identity(run),
        "params": {k: params[k] for k in ("threshold_recall", "threshold_fp", "top_share")},
    }
    raw_ece = None
    for kind in all_kinds():
        figures = overall.get(kind.name) or {}
        binary = kind.family is Family.BINARY
        out[kind.name] = _typed(figures, view_of(kind).headline)
        if binary and raw_ece is None:
            raw_ece = figures.get("ece")
            out["ece"] = {"raw": raw_ece, "calibrated": calibrated_ece,
                          "calibrated_by": calibrated_by if calibrated_ece is not None else None}
    return {
        **out,
        "questions": diag["questions"], "answered": diag["answered"],
        "unanswered": diag["unanswered"], "in_flight": diag["in_flight"],
        "attempts": diag["attempts"], "failed_attempts": diag["failed_attempts"],
        "decisions_failed": diag["decision_statuses"].get("failed", 0),
        "draw_rows": diag["mass_draws"], "low_mass_draws": diag["low_mass_draws"],
    }


def _typed(figures: Mapping[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any] | None:
    if not figures or not figures.get("n"):
        return None
    return {k: figures.get(k) for k in keys}


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.{digits}g}"
    return str(int(value)) if isinstance(value, float) else str(value)


def _of(hits: Any, total: Any, share: Any) -> str:
    """``k/n`` first, then the rate: "20/24 (83.3%)"."""
    rate = "-" if share is None else f"{share * 100:.3g}%"
    return f"{_num(hits)}/{_num(total)} ({rate})"


def identity_items(h: Mapping[str, Any]) -> list[HeadlineItem]:
    """Who answered and how: model, layout, mode, policy, answered by, simulator."""
    i = h["identity"]
    policy = f"{i['policy']}, at most {i['max_draws']} draws" if i.get("max_draws") else (
        str(i["policy"]))
    return [
        HeadlineItem("model", "model", str(i["model"])),
        HeadlineItem("layout", "layout", str(i["layout"])),
        HeadlineItem("mode", "mode", f"{i['mode']} reads"),
        HeadlineItem("policy", "policy", policy),
        HeadlineItem("answered_by", "answered by", str(i["answered_by"])),
        HeadlineItem("simulator", "simulator",
                     "yes (synthetic answers)" if i["simulator"] else "no"),
    ]


def _noul_items(n: Mapping[str, Any], t: Mapping[str, str]) -> list[HeadlineItem]:
    return [
        HeadlineItem("auc", "AUC", _num(n["auc"])),
        HeadlineItem("recall", f"recall >{t['r']}",
                     _of(n["recall_hits"], n["positives"], n["recall"])),
        HeadlineItem("top_share", f"in top {t['t']}",
                     _of(n["top_share_hits"], n["positives"], n["top_share"])),
        HeadlineItem("rank", "median rank, worst",
                     f"{_num(n['rank_median_pct'], 3)}%, {_num(n['rank_worst_pct'], 3)}%"),
        HeadlineItem("false_positives", f"false positives >{t['f']}",
                     f"{_num(n['fp_count'])} ({_num(n['fp_per_100_states'], 3)} per 100 "
                     "states)"),
        HeadlineItem("referral_band", f"referral band {t['r']}-{t['f']}",
                     f"{_num(n['referral_band'])} of {_num(n['n'])}"),
    ]


def _ece_item(ece: Mapping[str, Any]) -> HeadlineItem:
    value, note = f"{_num(ece['raw'], 3)} raw", ""
    if ece.get("calibrated") is not None:
        value += f", {_num(ece['calibrated'], 3)} calibrated"
        if ece.get("calibrated_by") and ece["calibrated_by"] != "--calibration":
            note = ece["calibrated_by"]
    return HeadlineItem("ece", "ECE", value, note)


def _typed_items(h: Mapping[str, Any]) -> list[HeadlineItem]:
    out = []
    for kind in all_kinds():
        f = h.get(kind.name)
        if not f or kind.family is Family.BINARY:
            continue
        if kind.family is Family.ORDINAL:
            out.append(HeadlineItem(kind.name, f"{kind.title}: MAE of level, accuracy",
                                    f"{_num(f['mae_level'], 3)}, {_num(f['accuracy'], 3)} of "
                                    f"{f['n']}"))
        else:
            out.append(HeadlineItem(kind.name, f"{kind.title} accuracy",
                                    f"{_num(f['accuracy'], 3)} of {f['n']}"))
    return out


def _binary(h: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The (first) yes/no kind's headline figures, None when it has none."""
    found = [h.get(k.name) for k in binary_kinds()]
    return next((f for f in found if f), None)


def _run_items(h: Mapping[str, Any]) -> list[HeadlineItem]:
    return [
        HeadlineItem("unanswered", "unanswered", f"{h['unanswered']}/{h['questions']}"),
        HeadlineItem("failed", "failed attempts", f"{h['failed_attempts']}/{h['attempts']}"),
        HeadlineItem("low_mass", "label mass <0.5",
                     f"{h['low_mass_draws']}/{h['draw_rows']} draws"),
    ]


def headline_items(h: Mapping[str, Any]) -> list[HeadlineItem]:
    """The headline's figures, worded with their counts (identity excluded)."""
    t = thresholds(h["params"])
    binary = _binary(h)
    items = [*_noul_items(binary, t), _ece_item(h["ece"])] if binary else []
    return [*items, *_typed_items(h), *_run_items(h)]


def headline_line(h: Mapping[str, Any]) -> str:
    """The headline in one line: "AUC 0.9832; recall >0.30 24/24 (1); ..."."""
    typed = {k.name for k in all_kinds()} - {k.name for k in binary_kinds()}
    items = [i for i in headline_items(h) if i.key in LINE_KEYS or i.key in typed]
    return "; ".join(f"{i.title} {i.text}" for i in items)
