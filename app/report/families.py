"""What a report shows of each family of question kinds (``app.engine.Family``): its figures,
its table columns, the figures compared between runs and the headline's. The report loops over
the registered kinds and shows each by its family; no module of the report names a kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine import Family, QuestionKind
from app.report.figures import (
    Params,
    binary_kinds,
    choice_figures,
    noul_figures,
    score_figures,
)
from app.report.labels import (
    CHOICE_COLUMNS,
    NOUL_COLUMNS,
    NOUL_RANK_COLUMNS,
    NOUL_THRESHOLD_COLUMNS,
    SCORE_COLUMNS,
)
from app.report.load import QuestionRow

__all__ = ["FAMILIES", "FamilyView", "has_binary", "view_of"]

Figures = dict[str, Any]


@dataclass(frozen=True)
class FamilyView:
    """How a family's questions are reported."""

    figures: Callable[[Sequence[QuestionRow], Params], Figures]
    columns: Mapping[str, str]  #: every column of its figures (overall tables, comparisons)
    #: its per-cell tables: (title suffix, columns), one table each
    parts: tuple[tuple[str, Mapping[str, str]], ...]
    compared: tuple[str, ...]  #: figures of the compact a-vs-b table per cell
    headline: tuple[str, ...]  #: figures the headline (and ``dreads run``'s summary) keeps
    confusion: bool = False  #: a confusion table of labels


_BINARY_HEADLINE = ("n", "positives", "negatives", "auc", "recall", "recall_hits", "top_share",
                    "top_share_hits", "rank_median_pct", "rank_worst_pct", "fp_count",
                    "fp_per_1000_neg", "fp_per_100_states", "referral_band")

FAMILIES: Mapping[Family, FamilyView] = {
    Family.BINARY: FamilyView(
        noul_figures, NOUL_COLUMNS,
        ((": ranking", NOUL_RANK_COLUMNS), (": thresholds", NOUL_THRESHOLD_COLUMNS)),
        ("auc", "recall", "fp_count", "ece"), _BINARY_HEADLINE),
    Family.NOMINAL: FamilyView(choice_figures, CHOICE_COLUMNS, (("", CHOICE_COLUMNS),),
                               ("accuracy", "log_loss"), ("n", "accuracy"), confusion=True),
    Family.ORDINAL: FamilyView(score_figures, SCORE_COLUMNS, (("", SCORE_COLUMNS),),
                               ("mae_level", "accuracy"), ("n", "accuracy", "mae_level")),
}


def view_of(kind: QuestionKind) -> FamilyView:
    """How questions of ``kind`` are reported."""
    return FAMILIES[kind.family]


def has_binary(doc: Mapping[str, Any]) -> bool:
    """Whether a report document has labelled yes/no questions (P(yes) lists, calibration)."""
    return any(doc["labelled"].get(k.name) for k in binary_kinds())
