"""What a report shows of each family of question kinds (``app.engine.Family``): its table
columns, the figures compared between runs and the headline's (its figures are
``figures.figures_of``'s). The report loops over the registered kinds and shows each by its
family; no module of the report names a kind. Light: the CLI's renderers import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.engine import Family, QuestionKind, all_kinds
from app.report.labels import (
    CHOICE_COLUMNS,
    NOUL_COLUMNS,
    NOUL_RANK_COLUMNS,
    NOUL_THRESHOLD_COLUMNS,
    SCORE_COLUMNS,
)

__all__ = ["FAMILIES", "FamilyView", "binary_kinds", "has_binary", "view_of"]


@dataclass(frozen=True)
class FamilyView:
    """How a family's questions are reported."""

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
        NOUL_COLUMNS,
        ((": ranking", NOUL_RANK_COLUMNS), (": thresholds", NOUL_THRESHOLD_COLUMNS)),
        ("auc", "recall", "fp_count", "ece"), _BINARY_HEADLINE),
    Family.NOMINAL: FamilyView(CHOICE_COLUMNS, (("", CHOICE_COLUMNS),),
                               ("accuracy", "log_loss"), ("n", "accuracy"), confusion=True),
    Family.ORDINAL: FamilyView(SCORE_COLUMNS, (("", SCORE_COLUMNS),),
                               ("mae_level", "accuracy"), ("n", "accuracy", "mae_level")),
}


def view_of(kind: QuestionKind) -> FamilyView:
    """How questions of ``kind`` are reported."""
    return FAMILIES[kind.family]


def binary_kinds() -> tuple[QuestionKind, ...]:
    """The kinds whose answer is P(positive) (yes/no): AUC, recall, calibration."""
    return tuple(k for k in all_kinds() if k.family is Family.BINARY)


def has_binary(doc: Mapping[str, Any]) -> bool:
    """Whether a report document has labelled yes/no questions (P(yes) lists, calibration)."""
    return any(doc["labelled"].get(k.name) for k in binary_kinds())
