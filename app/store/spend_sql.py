"""A run's spend as plain SQL over any ``Reader`` (``app.store.status_sql``), so ``dreads
status`` and ``dreads runs`` show it without loading SQLAlchemy.

    spend = run_spend(reader, run_id)
    spend.as_dict(done=120, total=1000)   # with the projected total
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from app.engine.pricing import SpendDelta, TokenPrices, describe_spend, projected_total

if TYPE_CHECKING:
    from app.store.status_sql import Reader

__all__ = ["NO_CELL", "CellSpend", "RunPrices", "RunSpendTotals", "all_spend", "run_spend"]

#: The cell of decisions that have none (a primary key column cannot be NULL).
NO_CELL = ""

_COLUMNS = "cell, decisions, reads, input_tokens, output_tokens, gpu_seconds, cost"
SPEND = f"SELECT {_COLUMNS} FROM run_spend WHERE run_id = :run ORDER BY cell"
ALL_SPEND = f"SELECT run_id, {_COLUMNS} FROM run_spend"
PRICES = ("SELECT price_input_per_mtok, price_output_per_mtok, max_cost FROM runs "
          "WHERE id = :run")
ALL_PRICES = "SELECT id, price_input_per_mtok, price_output_per_mtok, max_cost FROM runs"


@dataclass(frozen=True)
class RunPrices:
    """A run's token prices and budget (None: not given)."""

    tokens: TokenPrices = field(default_factory=TokenPrices)
    max_cost: float | None = None


@dataclass(frozen=True)
class CellSpend:
    """What a run spent in one cell (``cell`` None: decisions without one)."""

    cell: str | None
    spend: SpendDelta

    def as_dict(self) -> dict[str, Any]:
        return {"cell": self.cell, **_spend_dict(self.spend)}


@dataclass(frozen=True)
class RunSpendTotals:
    """What a run spent, in total and per cell, with its prices and budget."""

    total: SpendDelta = field(default_factory=SpendDelta)
    cells: tuple[CellSpend, ...] = ()
    prices: RunPrices = field(default_factory=RunPrices)

    @property
    def spent(self) -> SpendDelta:
        """The total, its cost $0 when the run is priced and nothing was recorded yet."""
        if self.total.cost is None and self.prices.tokens.priced:
            return replace(self.total, cost=0.0)
        return self.total

    def projected_cost(self, done: int, total: int) -> float | None:
        """The cost so far scaled to the run's decisions (None: no price, or none done)."""
        cost = self.spent.cost
        return None if cost is None else projected_total(cost, done, total)

    def line(self, done: int, total: int) -> str:
        """What ``status`` and the live page say (``describe_spend``)."""
        return describe_spend(self.spent, projected=self.projected_cost(done, total),
                              max_cost=self.prices.max_cost)

    def as_dict(self, *, done: int | None = None, total: int | None = None) -> dict[str, Any]:
        """As ``status --json``, ``runs --json`` and ``export`` show it; with ``done`` and
        ``total`` (decisions), the projected total."""
        out: dict[str, Any] = {
            **_spend_dict(self.spent),
            "price_input_per_mtok": self.prices.tokens.input_per_mtok,
            "price_output_per_mtok": self.prices.tokens.output_per_mtok,
            "max_cost_usd": self.prices.max_cost}
        if done is not None and total is not None:
            cost = self.projected_cost(done, total)
            out["projected_cost_usd"] = None if cost is None else round(cost, 6)
        return out


def _spend_dict(s: SpendDelta) -> dict[str, Any]:
    return {"decisions": s.decisions, "reads": s.reads, "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens, "gpu_seconds": round(s.gpu_seconds, 3),
            "cost_usd": None if s.cost is None else round(s.cost, 6)}


def _cell(row: Sequence[Any]) -> CellSpend:
    cell, decisions, reads, tok_in, tok_out, gpu_s, cost = row
    return CellSpend(None if cell == NO_CELL else cell,
                     SpendDelta(int(decisions), int(reads), int(tok_in), int(tok_out),
                                float(gpu_s), None if cost is None else float(cost)))


def _prices(row: Sequence[Any]) -> RunPrices:
    return RunPrices(TokenPrices(row[0], row[1]), row[2])


def _totals(cells: Sequence[CellSpend], prices: RunPrices) -> RunSpendTotals:
    total = SpendDelta()
    for c in cells:
        total = total.plus(c.spend)
    return RunSpendTotals(total, tuple(cells), prices)


def run_spend(reader: Reader, run_id: int) -> RunSpendTotals:
    """What run ``run_id`` spent, in total and per cell (cells by name)."""
    cells = [_cell(row) for row in reader.rows(SPEND, {"run": run_id})]
    found = reader.rows(PRICES, {"run": run_id})
    return _totals(cells, _prices(found[0]) if found else RunPrices())


def all_spend(reader: Reader) -> dict[int, RunSpendTotals]:
    """Every run's spend, by run id (``dreads runs``, the metrics)."""
    cells: dict[int, list[CellSpend]] = {}
    for row in reader.rows(ALL_SPEND, {}):
        cells.setdefault(int(row[0]), []).append(_cell(row[1:]))
    return {int(row[0]): _totals(cells.get(int(row[0]), []), _prices(row[1:]))
            for row in reader.rows(ALL_PRICES, {})}
