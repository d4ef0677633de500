"""Per-run gauges of ``dreads serve``'s ``/metrics``, read from SQL when Prometheus scrapes.

The SQL is what ``dreads status`` runs (``app.store.views``), for the most recent runs; their
state and counts are those of ``app.store.states``. One snapshot serves every scrape for
``ttl_s`` seconds, and concurrent scrapes wait for the one query round in progress instead of
starting another, so a scrape never runs the heavy queries twice in a short interval. A
database that does not answer leaves the last snapshot in place (logged) until the next round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

from app.errors import OutcomeClass, StoreError
from app.store.db import session_scope
from app.store.states import RunState
from app.store.types import SessionFactory
from app.store.views import RunStatusReport, recent_runs, run_status, status_by_cell

__all__ = ["RunMetrics", "RunSnapshot"]

log = logging.getLogger("dreads.metrics")


@dataclass(frozen=True)
class RunSnapshot:
    """One run as the gauges show it."""

    report: RunStatusReport
    by_cell: dict[tuple[str, str], int]  #: (cell, status) -> decisions


class RunMetrics:
    """A Prometheus collector of per-run gauges (register it in a ``CollectorRegistry``)."""

    def __init__(self, factory: SessionFactory, *, ttl_s: float = 10.0,
                 max_runs: int = 20, clock: Callable[[], float] = time.monotonic) -> None:
        self._factory = factory
        self._ttl_s = ttl_s
        self._max_runs = max_runs
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: list[RunSnapshot] = []
        self._taken_at: float | None = None
        #: query rounds run so far (a scrape inside the TTL adds none)
        self.rounds = 0

    def snapshot(self) -> list[RunSnapshot]:
        """The cached snapshot, refreshed when older than ``ttl_s``."""
        with self._lock:
            now = self._clock()
            if self._taken_at is None or now - self._taken_at >= self._ttl_s:
                try:
                    self._snapshot = self._load()
                except StoreError as exc:
                    log.warning("run metrics not refreshed: %s", exc.message)
                self._taken_at = now
                self.rounds += 1
            return self._snapshot

    def _load(self) -> list[RunSnapshot]:
        with session_scope(self._factory, what="run metrics") as session:
            return [RunSnapshot(run_status(session, run), status_by_cell(session, run.id))
                    for run in recent_runs(session, self._max_runs)]

    def describe(self) -> list[Metric]:
        return []  # no query at registration

    def collect(self) -> Iterator[Metric]:
        yield from _families(self.snapshot())


def _families(snapshot: list[RunSnapshot]) -> Iterator[Metric]:
    yield from _run_families(snapshot)
    yield from _spend_families(snapshot)
    yield from _cell_families(snapshot)
    yield from _failure_families(snapshot)


def _failure_families(snapshot: list[RunSnapshot]) -> Iterator[Metric]:
    """Failed attempts split as everywhere (``app.errors.OutcomeClass``): the read's per cell,
    the infrastructure's for the run alone (``cell=""``: never a cell's), and the run's
    pauses."""
    failures = GaugeMetricFamily("dreads_run_failures", "Failed attempts recorded in SQL, by "
                                 "kind and class: read (per cell) or infrastructure (the "
                                 "run's: cell is empty).", labels=["run", "cell", "kind", "class"])
    pauses = GaugeMetricFamily("dreads_run_pauses", "Pauses of the run so far, by what paused "
                               "it (breaker, budget) and whether it went on (resumed 1|0).",
                               labels=["run", "kind", "resumed"])
    for item in snapshot:
        name, report = item.report.run.name, item.report
        for cell in report.cells:
            for kind, n in cell.failures.items():
                failures.add_metric([name, cell.cell, kind, OutcomeClass.READ], n)
        for kind, n in report.infrastructure.by_kind().items():
            failures.add_metric([name, "", kind, OutcomeClass.INFRASTRUCTURE], n)
        counted: dict[tuple[str, str], int] = {}
        for pause in report.infrastructure.pauses:
            key = (pause.kind, "1" if pause.resumed_at is not None else "0")
            counted[key] = counted.get(key, 0) + 1
        for (kind, resumed), n in sorted(counted.items()):
            pauses.add_metric([name, kind, resumed], n)
    yield from (failures, pauses)


def _spend_families(snapshot: list[RunSnapshot]) -> Iterator[Metric]:
    cost = GaugeMetricFamily("dreads_run_spend_dollars", "What the run spent so far, in "
                             "dollars at its prices (absent when no price is set).",
                             labels=["run"])
    projected = GaugeMetricFamily("dreads_run_projected_spend_dollars", "Spend so far scaled "
                                  "to all the run's decisions (absent without a price).",
                                  labels=["run"])
    budget = GaugeMetricFamily("dreads_run_budget_dollars", "The run's --max-cost (absent "
                               "when it has none).", labels=["run"])
    tokens = GaugeMetricFamily("dreads_run_spend_tokens", "Tokens the run's requests spent, "
                               "input and output.", labels=["run", "kind"])
    gpu = GaugeMetricFamily("dreads_run_gpu_seconds", "GPU-seconds of the pods that read for "
                            "the run (their time shared among runs by reads).", labels=["run"])
    reads = GaugeMetricFamily("dreads_run_spend_reads", "Reads the run's recorded decisions "
                              "took: requests sent to the model server, as status and the "
                              "report's spend count them.", labels=["run"])
    for item in snapshot:
        name, report = item.report.run.name, item.report
        spend = report.spend
        if spend.total.cost is not None:
            cost.add_metric([name], spend.total.cost)
        ahead = spend.projected_cost(report.counts.get("done", 0), report.total)
        if ahead is not None:
            projected.add_metric([name], ahead)
        if spend.prices.max_cost is not None:
            budget.add_metric([name], spend.prices.max_cost)
        tokens.add_metric([name, "input"], spend.total.input_tokens)
        tokens.add_metric([name, "output"], spend.total.output_tokens)
        gpu.add_metric([name], spend.total.gpu_seconds)
        reads.add_metric([name], spend.total.reads)
    yield from (cost, projected, budget, tokens, gpu, reads)


def _run_families(snapshot: list[RunSnapshot]) -> Iterator[Metric]:
    state = GaugeMetricFamily("dreads_run_state", "The run's state: 1 for the one it is in "
                              "(active, paused, finished, cancelled), 0 for the others.",
                              labels=["run", "state"])
    remaining = GaugeMetricFamily("dreads_run_remaining_decisions", "Decisions pending, "
                                  "queued or leased.", labels=["run"])
    rate = GaugeMetricFamily("dreads_run_decisions_per_second", "Decisions finished per "
                             "second over the last 5 minutes (1 minute when busier).",
                             labels=["run"])
    eta = GaugeMetricFamily("dreads_run_eta_seconds", "Seconds left at the current rate "
                            "(absent while nothing finishes).", labels=["run"])
    for item in snapshot:
        name, report = item.report.run.name, item.report
        for value in RunState:
            state.add_metric([name, value.value], 1.0 if report.state is value else 0.0)
        remaining.add_metric([name], report.remaining)
        rate.add_metric([name], report.rate_per_s)
        if report.eta_s is not None:
            eta.add_metric([name], report.eta_s)
    yield from (state, remaining, rate, eta)


def _cell_families(snapshot: list[RunSnapshot]) -> Iterator[Metric]:
    decisions = GaugeMetricFamily("dreads_run_decisions", "Decisions of the run by cell and "
                                  "status (pending, queued, leased, done, failed, rejected, "
                                  "cancelled).", labels=["run", "cell", "status"])
    low_mass = GaugeMetricFamily("dreads_run_low_label_mass_answers", "Answers kept whose "
                                 "label mass is under 0.5, by cell.", labels=["run", "cell"])
    not_label = GaugeMetricFamily("dreads_run_argmax_not_label_answers", "Answers kept whose "
                                  "most likely token is not a label, by cell.",
                                  labels=["run", "cell"])
    answers = GaugeMetricFamily("dreads_run_questions_settled", "Questions of settled "
                                "decisions, by cell.", labels=["run", "cell"])
    unanswered = GaugeMetricFamily("dreads_run_unanswered_questions", "Questions of settled "
                                   "decisions with no answer, by cell.", labels=["run", "cell"])
    for item in snapshot:
        name = item.report.run.name
        for (cell_name, status), n in sorted(item.by_cell.items()):
            decisions.add_metric([name, cell_name, status], n)
        for cell in item.report.cells:
            low_mass.add_metric([name, cell.cell], cell.low_mass)
            not_label.add_metric([name, cell.cell], cell.argmax_not_label)
            answers.add_metric([name, cell.cell], cell.questions)
            unanswered.add_metric([name, cell.cell], cell.unanswered)
    yield from (decisions, low_mass, not_label, answers, unanswered)
