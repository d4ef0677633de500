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
from app.report import specs

__all__ = ["FAMILIES", "FamilyView", "binary_kinds", "has_binary", "view_of"]


@dataclass(frozen=True)
class FamilyView:
    """How a family's questions are reported (every part read from ``specs.SPECS``)."""

    family: Family
    confusion: bool = False  #: a confusion table of labels

    @property
    def columns(self) -> dict[str, str]:
        """Every column of its figures (overall tables, comparisons): {key: title}."""
        return specs.columns(self.family)

    @property
    def parts(self) -> tuple[tuple[str, dict[str, str]], ...]:
        """Its per-cell tables: (title suffix, columns), one table each."""
        return specs.part_columns(self.family)

    @property
    def compared(self) -> tuple[str, ...]:
        """Figures ``report --against`` compares."""
        return specs.compared(self.family)

    @property
    def headline(self) -> tuple[str, ...]:
        """Figures the headline (and ``dreads run``'s summary) keeps."""
        return specs.headline_keys(self.family)


FAMILIES: Mapping[Family, FamilyView] = {
    Family.BINARY: FamilyView(Family.BINARY),
    Family.NOMINAL: FamilyView(Family.NOMINAL, confusion=True),
    Family.ORDINAL: FamilyView(Family.ORDINAL),
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
