"""Spend recorded as it happens, and the budget that pauses a run.

Each commit of finished decisions (``app.runs.commit.GroupCommit``) adds, in its own
transaction, what those decisions spent to the run's spend rows, one per cell
(``app.store.spend.add_spend``: one ``INSERT ... ON CONFLICT DO UPDATE SET x = x + :d``
statement per commit, a row per cell, never per decision):

- tokens: a read's prompt tokens and the canvas rows it asked for (``max_tokens``, what a
  server's usage counts as output); a decision endpoint's ``usage``;
- GPU time: this process's busy time since its last commit (``PodMeter``), over the processes
  that share its pod, for runs answered by reads;
- dollars: the tokens at the run's token prices (``runs.price_*_per_mtok``, read with the
  chunk's claim, so a resume's new prices count from the next chunk), the GPU time at this
  worker's ``DREADS_GPU_PRICE_HOUR``. A part without a price adds no dollars: a run with no
  price at all has a cost of None, never 0.

Then, when the run has a budget (``runs.max_cost``) and its recorded cost reached it, the run
pauses (``PauseKind.BUDGET``, with the figures in its reason): claims skip it, the decisions
already leased finish (and are recorded, so the budget is passed by at most what was in
flight), a failure after the pause is not charged (``app.runs.breaker``), and
``dreads resume RUN --max-cost HIGHER`` goes on.
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from app.engine.pricing import SpendDelta, TokenPrices, gpu_cost
from app.errors import BudgetReached
from app.store.breaker import pause_run
from app.store.queue import Finished, finish_decisions
from app.store.records import PauseKind
from app.store.spend import RunPrices, add_spend, run_prices, spent_cost
from app.store.types import Session

__all__ = ["ChunkSpend", "Committed", "PodMeter", "budget_reason", "check_budget",
           "finish_and_spend"]


class PodMeter:
    """This process's share of its GPU pod's time, handed out commit by commit.

    The time counted is the time this process had a chunk open (idle time between chunks is
    nobody's), each moment once: ``take`` returns the busy time since the previous ``take``,
    divided by ``share`` (the worker processes that share the pod). Thread-safe."""

    def __init__(self, price_hour: float | None = None, *, share: int = 1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.price_hour = price_hour
        self.share = max(1, share)
        self._clock = clock
        self._lock = threading.Lock()
        self._open = 0
        self._since = 0.0  #: the later of the last take and the start of this busy stretch

    def begin(self) -> None:
        """A chunk starts."""
        with self._lock:
            if self._open == 0:
                self._since = self._clock()
            self._open += 1

    def end(self) -> None:
        """A chunk ended."""
        with self._lock:
            self._open = max(0, self._open - 1)

    def take(self) -> float:
        """GPU-seconds of this process since the previous take (while busy)."""
        with self._lock:
            now = self._clock()
            elapsed, self._since = max(0.0, now - self._since), now
        return elapsed / self.share


@dataclass(frozen=True)
class ChunkSpend:
    """How a chunk's commits record spend: its run, the run's prices and budget as its claim
    read them (a resume's new prices count from the next chunk), and the pod meter when its
    run is answered by reads on this process's GPU (None: a decision endpoint, no pod
    time)."""

    run_id: int
    run_name: str
    prices: RunPrices = field(default_factory=RunPrices)
    meter: PodMeter | None = None


@dataclass(frozen=True)
class Committed:
    """What one commit did: whether each decision's answers are the ones kept, and the
    budget's pause reason when this commit paused the run."""

    won: list[bool]
    paused: str | None = None


def finish_and_spend(session: Session, finished: Sequence[Finished], spend: ChunkSpend, *,
                     now: datetime) -> Committed:
    """``finish_decisions``, then their spend added (one statement) and, when the run has a
    budget, its recorded cost read and the budget checked, in the caller's transaction."""
    won = finish_decisions(session, finished, now=now)
    gpu_s = spend.meter.take() if spend.meter is not None else 0.0
    price_hour = spend.meter.price_hour if spend.meter is not None else None
    add_spend(session, spend.run_id,
              _by_cell(finished, spend.prices.tokens, gpu_s, price_hour))
    if spend.prices.max_cost is None:
        return Committed(won)
    spent = spent_cost(session, spend.run_id) or 0.0
    if spent < spend.prices.max_cost:
        return Committed(won)
    # crossing the budget the claim read: the run's own, which a resume may have raised
    max_cost = run_prices(session, spend.run_id).max_cost
    if max_cost is None or spent < max_cost:
        return Committed(won)
    reason = budget_reason(spent, max_cost, spend.run_name)
    paused = pause_run(session, spend.run_id, kind=PauseKind.BUDGET, reason=reason, now=now)
    return Committed(won, reason if paused else None)


def _by_cell(finished: Sequence[Finished], prices: TokenPrices, gpu_s: float,
             price_hour: float | None) -> dict[str | None, SpendDelta]:
    """Each cell's part of the commit: its tokens at the run's prices, and the pod time shared
    among the cells in proportion to their reads."""
    used: dict[str | None, SpendDelta] = {}
    for f in finished:
        one = SpendDelta(1, f.attempt.n_reads, f.input_tokens, f.output_tokens)
        used[f.claim.cell] = used.get(f.claim.cell, SpendDelta()).plus(one)
    reads = sum(d.reads for d in used.values())
    decisions = sum(d.decisions for d in used.values())
    out: dict[str | None, SpendDelta] = {}
    for cell, d in used.items():
        cell_gpu = gpu_s * (d.reads / reads if reads else d.decisions / decisions)
        costs = [c for c in (prices.cost(d.input_tokens, d.output_tokens),
                             gpu_cost(cell_gpu, price_hour)) if c is not None]
        out[cell] = replace(d, gpu_seconds=cell_gpu, cost=sum(costs) if costs else None)
    return out


def budget_reason(spent: float, max_cost: float, run_name: str) -> str:
    """What a run paused by its budget says."""
    return (f"recorded cost ${spent:.4f} reached its budget of ${max_cost:.4f} (--max-cost): "
            f"raise it with `dreads resume {shlex.quote(run_name)} --max-cost USD` to go on")


def check_budget(session: Session, run_id: int, run_name: str) -> None:
    """A paused run may go on only under its budget (with the prices and budget a resume
    just wrote).

    Raises:
        BudgetReached: its recorded cost is at or past its ``max_cost``.
    """
    max_cost = run_prices(session, run_id).max_cost
    if max_cost is None:
        return
    spent = spent_cost(session, run_id) or 0.0
    if spent >= max_cost:
        raise BudgetReached(
            f"run {run_name!r} has spent ${spent:.4f}, at or past its budget of "
            f"${max_cost:.4f}; give a higher budget to go on: `dreads resume "
            f"{shlex.quote(run_name)} --max-cost USD`")
