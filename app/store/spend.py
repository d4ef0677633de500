"""A run's spend in SQL: added to per commit, read per run and per cell, and its budget.

    add_spend       one ``INSERT ... ON CONFLICT DO UPDATE SET x = x + excluded.x`` of a
                    row per cell, per commit of finished decisions, in its transaction
    run_prices      the run's token prices and budget, read in the caller's transaction
    spent_cost      the run's recorded cost (the budget's check; ``pause_run`` pauses it)
    set_prices      resume (or submit) changes a run's prices or budget
    spend_of        what a run spent, in total and per cell

The arithmetic is ``app.engine.pricing``'s; what pauses a run and why is ``app.runs.budget``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from sqlalchemy import Table, bindparam, func, select, update

from app.engine.pricing import SpendDelta, TokenPrices
from app.store import dialects
from app.store.models import Run, RunSpend
from app.store.spend_sql import NO_CELL, RunPrices, RunSpendTotals, run_spend
from app.store.types import Session
from app.store.views import SessionReader

__all__ = ["PRICE_COLUMNS", "RunPrices", "add_spend", "run_prices", "set_prices", "spend_of",
           "spent_cost"]

#: What a run records of its prices and budget (``set_prices``).
PRICE_COLUMNS = ("price_input_per_mtok", "price_output_per_mtok", "max_cost")

#: Prebuilt Core statements of the commit path (compiled once, no ORM bookkeeping per call).
_SPEND = cast(Table, RunSpend.__table__)
_RUNS = cast(Table, Run.__table__)
_ADDED = ("decisions", "reads", "input_tokens", "output_tokens", "gpu_seconds", "cost")
_ADD = dialects.upsert_adding(_SPEND, ["run_id", "cell"], _ADDED)
_SPENT = (select(func.sum(_SPEND.c.cost)).where(_SPEND.c.run_id == bindparam("run_id")))
_PRICES = (select(_RUNS.c.price_input_per_mtok, _RUNS.c.price_output_per_mtok,
                  _RUNS.c.max_cost).where(_RUNS.c.id == bindparam("run_id")))


def add_spend(session: Session, run_id: int, by_cell: Mapping[str | None, SpendDelta]) -> None:
    """Add each cell's ``SpendDelta`` to the run's spend rows (created at the first): one
    prebuilt statement, executed for the cells' rows together (the driver's executemany), in
    the order of their cells, so that two workers' commits lock the rows they share in one
    order and cannot deadlock on them."""
    cells = sorted(((NO_CELL if cell is None else cell[:200], d) for cell, d in by_cell.items()),
                   key=lambda pair: pair[0])
    rows = [{"run_id": run_id, "cell": cell, "decisions": d.decisions, "reads": d.reads,
             "input_tokens": d.input_tokens, "output_tokens": d.output_tokens,
             "gpu_seconds": d.gpu_seconds, "cost": d.cost} for cell, d in cells]
    if not rows:
        return
    conn = session.connection()
    conn.execute(_ADD[dialects.name(conn)], rows if len(rows) > 1 else rows[0])


def run_prices(session: Session, run_id: int) -> RunPrices:
    """The run's token prices and budget."""
    row = session.connection().execute(_PRICES, {"run_id": run_id}).one()
    return RunPrices(TokenPrices(row[0], row[1]), row[2])


def spent_cost(session: Session, run_id: int) -> float | None:
    """The run's recorded cost in dollars (None: nothing priced)."""
    value = session.connection().execute(_SPENT, {"run_id": run_id}).scalar()
    return None if value is None else float(value)


def set_prices(session: Session, run_id: int, changes: Mapping[str, float | None]) -> None:
    """Write the prices and budget given (``price_input_per_mtok``, ``price_output_per_mtok``,
    ``max_cost``; a value None is left as it is)."""
    values = {k: v for k, v in changes.items() if v is not None}
    unknown = set(values) - set(PRICE_COLUMNS)
    if unknown:
        raise ValueError(f"not a price: {sorted(unknown)}")
    if values:
        session.execute(update(Run).where(Run.id == run_id).values(**values)
                        .execution_options(synchronize_session=False))


def spend_of(session: Session, run_id: int) -> RunSpendTotals:
    """What run ``run_id`` spent, in total and per cell (``spend_sql.run_spend``)."""
    return run_spend(SessionReader(session), run_id)
