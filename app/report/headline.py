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

from app.engine import Family, QuestionKind, all_kinds
from app.report.families import binary_kinds, view_of
from app.report.figure_text import interval_text, noise_text, num, partial_line, value_text
from app.report.labels import thresholds
from app.report.shape import Partial

__all__ = ["LINE_KEYS", "HeadlineItem", "headline", "headline_items", "headline_line",
           "identity_items"]

#: the items of the one line ``dreads report --html`` prints
LINE_KEYS = ("partial", "auc", "recall", "top_share", "false_positives", "ece", "unanswered",
             "failed")


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
             blocks: Mapping[str, Mapping[str, Mapping[str, Any]]], diag: Mapping[str, Any],
             calibrated_ece: Mapping[str, float | None] | None = None, *,
             calibrated_by: str | None = None,
             partial: Partial | None = None) -> dict[str, Any]:
    """The headline as data: ``blocks`` maps each kind's name (noul, choice, score, ...) to
    its questions' overall BLOCKs (``sections.question_blocks``); each question keeps its
    headline figures (``specs``) with their intervals and draw noise. ``calibrated_ece`` is
    each yes/no question's calibrated ECE, made as ``calibrated_by`` says."""
    out: dict[str, Any] = {
        "identity": _identity(run), "partial": dict(partial) if partial else None,
        "params": {k: params[k] for k in ("threshold_recall", "threshold_fp", "top_share")},
    }
    calibrated = calibrated_ece or {}
    for kind in all_kinds():
        keys = view_of(kind).headline
        questions = {q: _kept(b, keys) for q, b in (blocks.get(kind.name) or {}).items()
                     if b["figures"].get("n")}
        if kind.family is Family.BINARY:
            for q, kept in questions.items():
                kept["calibrated_ece"] = calibrated.get(q)
        out[kind.name] = {"questions": questions} if questions else None
    return {
        **out,
        "ece": {"calibrated_by": calibrated_by if any(
            v is not None for v in calibrated.values()) else None},
        "questions": diag["questions"], "answered": diag["answered"],
        "unanswered": diag["unanswered"], "in_flight": diag["in_flight"],
        "attempts": diag["attempts"], "failed_attempts": diag["failed_attempts"],
        "decisions_failed": diag["decision_statuses"].get("failed", 0),
        "draw_rows": diag["mass_draws"], "low_mass_draws": diag["low_mass_draws"],
    }


def _kept(block: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A BLOCK cut to the headline's figures."""
    intervals, sd = block.get("intervals") or {}, block.get("draw_sd") or {}
    return {"replicates": block.get("replicates"), "partial": block.get("partial", False),
            "figures": {k: block["figures"].get(k) for k in keys},
            "intervals": {k: intervals[k] for k in keys if k in intervals},
            "draw_sd": {k: sd[k] for k in keys if k in sd}}


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


def _noul_items(b: Mapping[str, Any], t: Mapping[str, str], params: Mapping[str, Any],
                prefix: str, by: str | None) -> list[HeadlineItem]:
    n = b["figures"]

    def text(key: str) -> str:
        return value_text(Family.BINARY, key, b, params)

    bounds = interval_text((b.get("intervals") or {}).get("ece"))
    ece = f"{num(n['ece'], 3)} raw" + (f" {bounds}" if bounds and n["ece"] is not None else "")
    note = ""
    if b.get("calibrated_ece") is not None:
        ece += f", {num(b['calibrated_ece'], 3)} calibrated"
        note = by if by and by != "--calibration" else ""
    return [
        HeadlineItem("auc", f"{prefix}AUC", text("auc")),
        HeadlineItem("recall", f"{prefix}recall >{t['r']}", text("recall")),
        HeadlineItem("top_share", f"{prefix}in top {t['t']}", text("top_share")),
        HeadlineItem("rank", f"{prefix}median rank, worst",
                     f"{_pct_of(b, 'rank_median_pct')}, {num(n['rank_worst_pct'], 3)}%"),
        HeadlineItem("false_positives", f"{prefix}false positives >{t['f']}",
                     f"{num(n['fp_count'])} "
                     f"({_pct_of(b, 'fp_per_100_states', '', noisy=False)} per 100 states)"),
        HeadlineItem("referral_band", f"{prefix}referral band {t['r']}-{t['f']}",
                     f"{num(n['referral_band'])} of {num(n['n'])}"),
        HeadlineItem("ece", f"{prefix}ECE", ece, note),
    ]


def _pct_of(b: Mapping[str, Any], key: str, unit: str = "%", *, noisy: bool = True) -> str:
    """``10.5% [6, 15]`` with its draw noise: a figure whose unit follows the value."""
    value = b["figures"].get(key)
    bounds = interval_text((b.get("intervals") or {}).get(key))
    text = f"{num(value, 3)}{unit if value is not None else ''}"
    text += f" {bounds}" if bounds and value is not None else ""
    noise = noise_text(Family.BINARY, b, key) if noisy else ""
    return f"{text} ({noise})" if noise else text


def _questions(h: Mapping[str, Any], kind: QuestionKind) -> Mapping[str, Mapping[str, Any]]:
    return (h.get(kind.name) or {}).get("questions") or {}


def _prefix(kind: QuestionKind, qid: str, many: bool) -> str:
    return f"{qid}: " if many else ""


def _typed_items(h: Mapping[str, Any]) -> list[HeadlineItem]:
    out = []
    for kind in all_kinds():
        questions = _questions(h, kind)
        if kind.family is Family.BINARY:
            continue
        for qid, b in questions.items():
            pre = _prefix(kind, qid, len(questions) > 1)
            f = b["figures"]
            if kind.family is Family.ORDINAL:
                out.append(HeadlineItem(kind.name, f"{pre}{kind.title}: MAE of level, accuracy",
                                        f"{value_text(kind.family, 'mae_level', b)}, "
                                        f"{value_text(kind.family, 'accuracy', b)} of {f['n']}"))
            else:
                out.append(HeadlineItem(kind.name, f"{pre}{kind.title} accuracy",
                                        f"{value_text(kind.family, 'accuracy', b)} of "
                                        f"{f['n']}"))
    return out


def _run_items(h: Mapping[str, Any]) -> list[HeadlineItem]:
    return [
        HeadlineItem("unanswered", "unanswered", f"{h['unanswered']}/{h['questions']}"),
        HeadlineItem("failed", "failed attempts", f"{h['failed_attempts']}/{h['attempts']}"),
        HeadlineItem("low_mass", "label mass <0.5",
                     f"{h['low_mass_draws']}/{h['draw_rows']} draws"),
    ]


def headline_items(h: Mapping[str, Any]) -> list[HeadlineItem]:
    """The headline's figures, worded with their counts and intervals (identity excluded);
    each yes/no question's own figures, titled with its id when there are several."""
    t = thresholds(h["params"])
    items: list[HeadlineItem] = []
    if h.get("partial"):
        items.append(HeadlineItem("partial", "partial",
                                  partial_line(h["partial"]).removeprefix("partial: ")))
    by = (h.get("ece") or {}).get("calibrated_by")
    for kind in binary_kinds():
        questions = _questions(h, kind)
        for qid, b in questions.items():
            items += _noul_items(b, t, h["params"], _prefix(kind, qid, len(questions) > 1), by)
    return [*items, *_typed_items(h), *_run_items(h)]


def headline_line(h: Mapping[str, Any]) -> str:
    """The headline in one line: "AUC 0.9832 [0.95, 0.99]; recall >0.30 24/24 (...); ..."."""
    typed = {k.name for k in all_kinds()} - {k.name for k in binary_kinds()}
    items = [i for i in headline_items(h) if i.key in LINE_KEYS or i.key in typed]
    return "; ".join(f"{i.title} {i.text}" for i in items)
