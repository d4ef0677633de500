"""The one table of a report's figures: key, title, kind, interval method, where it shows.

Every figure a figure function returns (``figures.py``) has one ``FigureSpec`` here, keyed by
its family's questions (``app.engine.Family``) and its key; the column titles, the headline,
``dreads run``'s summary, the comparison's figure list and the glossary read this table, so a
figure is added by adding its row and computing it. ``spec`` raises on an unknown key: a typo
fails loudly, never silently. Light: no scipy / scikit-learn import (the CLI's renderers use it).

Titles carry the report's thresholds: ``{r}`` recall, ``{f}`` false positives, ``{t}`` top share
(``labels.thresholds``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app.engine import Family

__all__ = [
    "SPECS",
    "FigureKind",
    "FigureSpec",
    "Method",
    "check_keys",
    "columns",
    "compared",
    "headline_keys",
    "part_columns",
    "spec",
    "specs_of",
    "title",
]


class FigureKind(StrEnum):
    """What a figure is, which decides how its uncertainty is stated."""

    RATE = "rate"  #: k/n (times ``scale``): ``hits`` of ``total``
    AUC = "auc"  #: an area under the ROC curve
    CONTINUOUS = "continuous"  #: a mean, an error, a rank
    COUNT = "count"  #: a plain count: no interval


class Method(StrEnum):
    """How a figure's 95% interval over items is made (``app.report.intervals``)."""

    WILSON = "Wilson"
    DELONG = "DeLong"
    BOOTSTRAP = "bootstrap"
    ORDER_STATISTIC = "order statistic"
    NONE = "none"


#: a plain-words line per interval method: the glossary and docs/commands.md#report
METHOD_HELP: Mapping[Method, str] = {
    Method.WILSON: "a share k of n: the range of true shares that could well have given k of n "
                   "(Wilson score interval); wide when n is small.",
    Method.DELONG: "AUC: the range the AUC would likely fall in on another set of items like "
                   "these (DeLong's variance of the AUC); where the AUC is 0 or 1, or a class "
                   "has one item, the exact binomial interval instead.",
    Method.BOOTSTRAP: "the figure recomputed on 1,000 resamples of the decisions (fewer, at "
                      "least 400, above 100,000 decisions), all questions and replicates of one "
                      "decision kept together, with a fixed seed (--json's params.seed): the "
                      "same report prints the same interval; the middle 95% of those values.",
    Method.ORDER_STATISTIC: "a median: the ranks between which the true median lies with 95% "
                            "confidence, read off the sorted values (no assumption on their "
                            "shape).",
    Method.NONE: "no interval: a count, or a worst case, which no resampling states well.",
}


@dataclass(frozen=True)
class FigureSpec:
    """One figure of a family's questions."""

    key: str  #: the document key (``figures[key]``, ``intervals[key]``)
    title: str  #: column / headline title, with {r}/{f}/{t} threshold slots
    kind: FigureKind
    method: Method  #: how its interval is made; ``Method.NONE``: no interval
    family: Family
    hits: str | None = None  #: RATE: key of k
    total: str | None = None  #: RATE: key of n
    scale: float = 1.0  #: RATE: the figure is ``scale * k / n`` (per 1,000: 1000)
    part: str | None = None  #: the per-cell table it is a column of (None: not a column)
    in_headline: bool = False  #: the headline and ``dreads run``'s summary keep it
    compared: bool = False  #: ``report --against`` compares it
    help: str = ""  #: the glossary line

    @property
    def has_interval(self) -> bool:
        return self.method is not Method.NONE


def _count(key: str, title: str, family: Family, *, part: str | None = None,
           headline: bool = False, help: str = "") -> FigureSpec:
    return FigureSpec(key, title, FigureKind.COUNT, Method.NONE, family, part=part,
                      in_headline=headline, help=help)


_B, _C, _S = Family.BINARY, Family.NOMINAL, Family.ORDINAL
RANKING, THRESHOLDS = ": ranking", ": thresholds"

_BINARY: tuple[FigureSpec, ...] = (
    _count("n", "n", _B, part=RANKING, headline=True, help="answered labelled questions"),
    _count("positives", "yes", _B, part=RANKING, headline=True),
    _count("negatives", "no", _B, part=RANKING, headline=True),
    _count("labelled", "labelled", _B, help="labelled questions, answered or not"),
    _count("unanswered", "unanswered", _B),
    FigureSpec("unanswered_share", "unanswered", FigureKind.RATE, Method.WILSON, _B,
               hits="unanswered", total="labelled", help="share of labelled questions "
               "finished without an answer"),
    _count("distinct_states", "states", _B),
    FigureSpec("auc", "AUC", FigureKind.AUC, Method.DELONG, _B, part=RANKING, in_headline=True,
               compared=True),
    FigureSpec("top_share", "in top {t}", FigureKind.RATE, Method.WILSON, _B,
               hits="top_share_hits", total="positives", part=RANKING, in_headline=True,
               compared=True),
    _count("top_share_hits", "in top {t}", _B, headline=True),
    _count("top_share_cap", "most possible in top {t}", _B, headline=True,
           help="the most positives the top {t} can hold: {t} of the answered questions"),
    FigureSpec("rank_median_pct", "median rank %", FigureKind.CONTINUOUS,
               Method.ORDER_STATISTIC, _B, part=RANKING, in_headline=True),
    FigureSpec("rank_worst_pct", "worst rank %", FigureKind.CONTINUOUS, Method.NONE, _B,
               part=RANKING, in_headline=True),
    FigureSpec("recall", "recall >{r}", FigureKind.RATE, Method.WILSON, _B,
               hits="recall_hits", total="positives", part=THRESHOLDS, in_headline=True,
               compared=True),
    _count("recall_hits", "recall >{r}", _B, headline=True),
    _count("fp_count", "false pos. >{f}", _B, part=THRESHOLDS, headline=True),
    FigureSpec("fp_per_1000_neg", "FP per 1,000 no", FigureKind.RATE, Method.WILSON, _B,
               hits="fp_count", total="negatives", scale=1000.0, part=THRESHOLDS,
               in_headline=True, compared=True),
    FigureSpec("fp_per_100_states", "FP per 100 states", FigureKind.RATE, Method.WILSON, _B,
               hits="fp_count", total="distinct_states", scale=100.0, part=THRESHOLDS,
               in_headline=True),
    _count("referral_band", "referral band {r}-{f}", _B, part=THRESHOLDS, headline=True),
    FigureSpec("referral_band_share", "referral band share", FigureKind.RATE, Method.WILSON,
               _B, hits="referral_band", total="n"),
    _count("referral_band_pos", "positives in referral band", _B),
    FigureSpec("ece", "ECE", FigureKind.CONTINUOUS, Method.BOOTSTRAP, _B, part=THRESHOLDS,
               in_headline=True, compared=True),
    FigureSpec("brier", "Brier", FigureKind.CONTINUOUS, Method.BOOTSTRAP, _B, part=THRESHOLDS,
               compared=True),
)

_CHOICE: tuple[FigureSpec, ...] = (
    _count("n", "n", _C, part="", headline=True),
    _count("labelled", "labelled", _C),
    FigureSpec("accuracy", "accuracy", FigureKind.CONTINUOUS, Method.BOOTSTRAP, _C, part="",
               in_headline=True, compared=True),
    FigureSpec("log_loss", "log loss", FigureKind.CONTINUOUS, Method.BOOTSTRAP, _C, part="",
               compared=True),
    _count("unanswered", "unanswered", _C, part=""),
    FigureSpec("unanswered_share", "unanswered share", FigureKind.RATE, Method.WILSON, _C,
               hits="unanswered", total="labelled"),
)

_SCORE: tuple[FigureSpec, ...] = (
    _count("n", "n", _S, part="", headline=True),
    _count("labelled", "labelled", _S),
    FigureSpec("mae_level", "MAE of level", FigureKind.CONTINUOUS, Method.BOOTSTRAP, _S,
               part="", in_headline=True, compared=True),
    FigureSpec("accuracy", "top-level accuracy", FigureKind.CONTINUOUS, Method.BOOTSTRAP, _S,
               part="", in_headline=True, compared=True),
    _count("unanswered", "unanswered", _S, part=""),
    FigureSpec("unanswered_share", "unanswered share", FigureKind.RATE, Method.WILSON, _S,
               hits="unanswered", total="labelled"),
)

#: family -> its figures, in display order
SPECS: Mapping[Family, Mapping[str, FigureSpec]] = {
    family: {s.key: s for s in rows}
    for family, rows in ((_B, _BINARY), (_C, _CHOICE), (_S, _SCORE))
}


def specs_of(family: Family) -> tuple[FigureSpec, ...]:
    """Every figure of ``family``'s questions, in display order."""
    return tuple(SPECS[family].values())


def spec(family: Family, key: str) -> FigureSpec:
    """The spec of figure ``key``; KeyError naming the known keys when there is none."""
    try:
        return SPECS[family][key]
    except KeyError:
        known = ", ".join(SPECS.get(family, {}))
        raise KeyError(f"no figure {key!r} for {family} questions (known: {known})") from None


def check_keys(family: Family, keys: Iterable[str]) -> None:
    """Raise KeyError unless ``keys`` are exactly ``family``'s figure keys."""
    got, want = set(keys), set(SPECS[family])
    if got != want:
        raise KeyError(f"{family} figures differ from their specs: not specified "
                       f"{sorted(got - want)}, not computed {sorted(want - got)}")


def part_columns(family: Family) -> tuple[tuple[str, dict[str, str]], ...]:
    """The per-cell tables of ``family``: (title suffix, {key: column title}) each."""
    parts: dict[str, dict[str, str]] = {}
    for s in specs_of(family):
        if s.part is not None:
            parts.setdefault(s.part, {})[s.key] = s.title
    return tuple(parts.items())


def columns(family: Family) -> dict[str, str]:
    """Every column of ``family``'s figures ({key: title}), in display order."""
    return {k: t for _, cols in part_columns(family) for k, t in cols.items()}


def compared(family: Family) -> tuple[str, ...]:
    """The figures ``report --against`` compares."""
    return tuple(s.key for s in specs_of(family) if s.compared)


def headline_keys(family: Family) -> tuple[str, ...]:
    """The figures the headline and ``dreads run``'s summary keep."""
    return tuple(s.key for s in specs_of(family) if s.in_headline)


def title(family: Family, key: str, params: Mapping[str, Any] | None = None) -> str:
    """The title of figure ``key`` with the thresholds of ``params`` filled in."""
    text = spec(family, key).title
    if params is None:
        return text
    from app.report.labels import thresholds
    return text.format(**thresholds(params))
