"""Spend in SQL, on PostgreSQL and SQLite: a commit of finished decisions adds their tokens,
reads, GPU time and cost to one row per cell (upserts adding, NULL cost kept NULL with no
price), the projected total, the budget pausing the run once (claims skip it), and resume's
budget check."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.errors import BudgetReached
from app.runs.budget import ChunkSpend, PodMeter, check_budget, finish_and_spend
from app.store.db import session_scope
from app.store.models import Decision, DecisionPayload, Run
from app.store.queue import AttemptInfo, Claimed, Finished, claim_decisions, utcnow
from app.store.spend import run_prices, set_prices, spend_of

Factory = sessionmaker[Session]


def _seed(factory: Factory, n: int) -> tuple[int, list[int]]:
    with session_scope(factory) as s:
        run = Run(name="r1", settings={}, settings_hash="h", upstream="http://m:8001")
        s.add(run)
        s.flush()
        rows = [Decision(run_id=run.id, key=f"d{i}", cell=None if i % 3 == 2 else f"c{i % 3}")
                for i in range(n)]
        s.add_all(rows)
        s.flush()
        s.add_all(DecisionPayload(decision_id=d.id, payload={"state": "s"}) for d in rows)
        return run.id, [d.id for d in rows]


def _claim(factory: Factory, ids: list[int]) -> list[Claimed]:
    with session_scope(factory) as s:
        return claim_decisions(s, decision_ids=ids, owner="w", lease_s=60)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _commit(factory: Factory, run_id: int, claims: list[Claimed],
            meter: PodMeter | None = None) -> str | None:
    finished = [Finished(claim=c, answers=[], draws=[], attempt=AttemptInfo(n_reads=2),
                         question_ids=[], input_tokens=300, output_tokens=10) for c in claims]
    with session_scope(factory) as s:  # the prices as the chunk's claim reads them
        prices = run_prices(s, run_id)
    with session_scope(factory) as s:
        return finish_and_spend(s, finished, ChunkSpend(run_id, "r1", prices, meter),
                                now=utcnow()).paused


def test_a_commit_adds_per_cell_and_no_price_means_no_dollars(factory: Factory) -> None:
    run_id, ids = _seed(factory, 6)
    clock = _Clock()
    meter = PodMeter(None, share=2, clock=clock)
    meter.begin()
    clock.now += 8.0  # 8 s of the pod, shared by 2 processes: 4 s are this one's
    _commit(factory, run_id, _claim(factory, ids[:3]), meter)
    _commit(factory, run_id, _claim(factory, ids[3:]), meter)  # no time passed
    with session_scope(factory) as s:
        spend = spend_of(s, run_id)
    t = spend.total
    assert (t.decisions, t.reads, t.input_tokens, t.output_tokens) == (6, 12, 1800, 60)
    assert t.gpu_seconds == pytest.approx(4.0) and t.cost is None
    assert {c.cell: c.spend.decisions for c in spend.cells} == {None: 2, "c0": 2, "c1": 2}
    assert sum(c.spend.gpu_seconds for c in spend.cells) == pytest.approx(4.0)
    assert spend.projected_cost(6, 12) is None
    assert spend.as_dict(done=6, total=12)["cost_usd"] is None


def test_the_pod_time_is_priced_at_the_workers_price(factory: Factory) -> None:
    run_id, ids = _seed(factory, 2)
    clock = _Clock()
    meter = PodMeter(3.6, clock=clock)  # $3.60 an hour: $0.001 a second
    meter.begin()
    clock.now += 5.0
    _commit(factory, run_id, _claim(factory, ids), meter)
    meter.end()
    clock.now += 60.0  # idle: nobody's
    meter.begin()
    clock.now += 1.0
    assert meter.take() == pytest.approx(1.0)
    with session_scope(factory) as s:
        total = spend_of(s, run_id).total
    assert total.gpu_seconds == pytest.approx(5.0) and total.cost == pytest.approx(0.005)


def test_prices_and_a_budget_pause_the_run_once(factory: Factory) -> None:
    run_id, ids = _seed(factory, 9)
    with session_scope(factory) as s:  # $1 per million: 300 tokens = $0.0003 a decision
        set_prices(s, run_id, {"price_input_per_mtok": 1.0, "price_output_per_mtok": None,
                               "max_cost": 0.0012})
    assert _commit(factory, run_id, _claim(factory, ids[:2])) is None  # $0.0006
    reason = _commit(factory, run_id, _claim(factory, ids[2:4]))  # $0.0012: the budget
    assert reason is not None and "reached its budget of $0.0012" in reason
    assert "dreads resume r1 --max-cost USD" in reason
    with session_scope(factory) as s:
        run = s.scalars(select(Run)).one()
        assert (run.status, run.pause_kind) == ("paused", "budget")
        spend = spend_of(s, run_id)
    assert spend.total.cost == pytest.approx(0.0012)
    assert spend.projected_cost(4, 9) == pytest.approx(0.0027)
    assert _claim(factory, ids[4:]) == []  # no claim takes a paused run's decisions
    with session_scope(factory) as s, pytest.raises(BudgetReached, match="higher budget"):
        check_budget(s, run_id, "r1")
    with session_scope(factory) as s:
        set_prices(s, run_id, {"max_cost": 1.0})
        check_budget(s, run_id, "r1")  # a higher budget goes on


def test_a_budget_raised_meanwhile_is_the_one_that_counts(factory: Factory) -> None:
    """A chunk claimed under the old budget crosses it after a resume raised it: the run's own
    budget decides, so the run does not pause."""
    run_id, ids = _seed(factory, 4)
    with session_scope(factory) as s:
        set_prices(s, run_id, {"price_input_per_mtok": 1.0, "max_cost": 0.0006})
    with session_scope(factory) as s:
        stale = run_prices(s, run_id)
        set_prices(s, run_id, {"max_cost": 1.0})
    finished = [Finished(claim=c, answers=[], draws=[], attempt=AttemptInfo(n_reads=1),
                         question_ids=[], input_tokens=300) for c in _claim(factory, ids)]
    with session_scope(factory) as s:
        assert finish_and_spend(s, finished, ChunkSpend(run_id, "r1", stale),
                                now=utcnow()).paused is None
    with session_scope(factory) as s:
        assert s.scalars(select(Run.status)).one() == "active"


def test_two_workers_adding_to_the_same_cells_never_deadlock(factory: Factory) -> None:
    """Two workers' commits add to the rows of the same cells, each listing them in its own
    order: the rows are written in one order, so neither waits on the other in a cycle (a
    PostgreSQL deadlock aborts a commit, and the decisions come back as db_error attempts)."""
    import threading

    from app.engine.pricing import SpendDelta
    from app.store.spend import add_spend

    if factory.kw["bind"].dialect.name != "postgresql":
        pytest.skip("one writer at a time on SQLite")
    run_id, _ = _seed(factory, 1)
    cells = [f"c{i}" for i in range(8)]
    delta = SpendDelta(decisions=1, reads=1, input_tokens=1, output_tokens=1, gpu_seconds=0.0,
                       cost=None)
    errors: list[BaseException] = []

    def worker(order: list[str]) -> None:
        try:
            for _ in range(60):
                with session_scope(factory) as s:
                    add_spend(s, run_id, {cell: delta for cell in order})
        except BaseException as exc:  # a deadlock: the commit was aborted
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(order,))
               for order in (cells, cells[::-1], cells[::2] + cells[1::2])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]
    with session_scope(factory) as s:
        totals = spend_of(s, run_id)
    assert totals.total.decisions == 3 * 60 * len(cells)
