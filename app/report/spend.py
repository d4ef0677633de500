"""The report's spend section: what the run cost, in total and per cell, and per 1,000
decisions, with the tokens and GPU-seconds it came from. A run without a price shows no
dollar figure (``-``), only what it used.

    section = spend_section(spend_of(session, run_id))
    rows = spend_rows(section)     # the same rows for the terminal and the page
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.engine.pricing import SpendDelta
from app.store.spend_sql import RunSpendTotals

__all__ = ["SPEND_COLUMNS", "spend_note", "spend_rows", "spend_section"]

SPEND_COLUMNS = ("cell", "decisions", "reads", "input tokens", "output tokens", "GPU-seconds",
                 "cost", "per 1,000 decisions")


def _figures(spend: SpendDelta) -> dict[str, Any]:
    per_1000 = (spend.cost / spend.decisions * 1000.0
                if spend.cost is not None and spend.decisions else None)
    return {"decisions": spend.decisions, "reads": spend.reads,
            "input_tokens": spend.input_tokens, "output_tokens": spend.output_tokens,
            "gpu_seconds": spend.gpu_seconds, "cost_usd": spend.cost,
            "cost_per_1000_usd": per_1000}


def spend_section(totals: RunSpendTotals) -> dict[str, Any]:
    """The run's spend and each cell's (``decisions``: those finished and recorded; the cost
    per 1,000 of them), with the prices and budget."""
    prices = totals.prices
    return {"run": _figures(totals.total),
            "cells": {c.cell or "(none)": _figures(c.spend) for c in totals.cells},
            "price_input_per_mtok": prices.tokens.input_per_mtok,
            "price_output_per_mtok": prices.tokens.output_per_mtok,
            "max_cost_usd": prices.max_cost}


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def _row(name: str, f: Mapping[str, Any]) -> list[str]:
    return [name, f"{f['decisions']:,}", f"{f['reads']:,}", f"{f['input_tokens']:,}",
            f"{f['output_tokens']:,}", f"{f['gpu_seconds']:,.1f}", _money(f["cost_usd"]),
            _money(f["cost_per_1000_usd"])]


def spend_rows(section: Mapping[str, Any]) -> list[list[str]]:
    """The table's rows: the whole run, then each cell (only when there are several)."""
    cells: Sequence[tuple[str, Mapping[str, Any]]] = list(section["cells"].items())
    rows = [_row("the run", section["run"])]
    if len(cells) > 1:
        rows += [_row(name, f) for name, f in cells]
    return rows


def spend_note(section: Mapping[str, Any]) -> str:
    """Under the table: the prices, or that there are none."""
    pi, po = section["price_input_per_mtok"], section["price_output_per_mtok"]
    if pi is None and po is None and section["run"]["cost_usd"] is None:
        return ("no price set: tokens and GPU-seconds only (dreads resume RUN --price-input "
                "USD --price-output USD prices what follows; workers: DREADS_GPU_PRICE_HOUR)")
    parts = [f"tokens at ${pi or 0:g} / ${po or 0:g} per million input / output"]
    if section["max_cost_usd"] is not None:
        parts.append(f"budget ${section['max_cost_usd']:g}")
    return "; ".join(parts)
