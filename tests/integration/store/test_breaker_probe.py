"""The breaker's half-open state in SQL, on PostgreSQL and SQLite: a run paused by the breaker
is probed once an interval however many workers look (a guarded UPDATE), resumes when a probe
is answered (its queued decisions back to pending); a budget pause is never probed, nor a run
paused longer than the give-up time."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from app.runs.breaker import BreakerPolicy
from app.runs.half_open import probe_due_runs
from app.store.breaker import pause_run, take_probe
from app.store.db import session_scope
from app.store.models import Decision, Run
from app.store.queue import utcnow
from app.store.records import RunInfo

Factory = sessionmaker[Session]
POLICY = BreakerPolicy(probe_s=30.0)


def _paused_run(factory: Factory, name: str = "r1", kind: str = "breaker",
                paused_s_ago: float = 5.0) -> int:
    with session_scope(factory) as s:
        run = Run(name=name, settings={}, settings_hash="h", upstream="http://m:8001")
        s.add(run)
        s.flush()
        s.add_all(Decision(run_id=run.id, key=f"d{i}", status="queued") for i in range(3))
        assert pause_run(s, run.id, kind=kind, reason="50 of the last 50 attempts failed",
                         now=utcnow() - timedelta(seconds=paused_s_ago))
        return run.id


def _row(factory: Factory, run_id: int) -> tuple[str, str | None]:
    with session_scope(factory) as s:
        run = s.get(Run, run_id)
        assert run is not None
        return run.status, run.pause_kind


def _statuses(factory: Factory, run_id: int) -> list[str]:
    with session_scope(factory) as s:
        return sorted(s.scalars(select(Decision.status).where(Decision.run_id == run_id)))


def test_eight_workers_probe_a_paused_run_once_an_interval(factory: Factory) -> None:
    run_id = _paused_run(factory)
    probes: list[str] = []
    lock = threading.Lock()

    def down(run: RunInfo) -> str:
        with lock:
            probes.append(run.name)
        return "connection refused"

    def one_worker() -> tuple[str, ...]:
        return probe_due_runs(factory, POLICY, down, serves=lambda _run: True).probed

    with ThreadPoolExecutor(8) as pool:
        rounds = list(pool.map(lambda _: one_worker(), range(8)))
    assert probes == ["r1"]
    assert sorted(rounds) == [()] * 7 + [("r1",)]
    assert _row(factory, run_id) == ("paused", "breaker")
    # the next interval: due again
    with session_scope(factory) as s:
        s.execute(update(Run).values(probed_at=utcnow() - timedelta(seconds=31)))
    assert probe_due_runs(factory, POLICY, down, serves=lambda _run: True).probed == ("r1",)
    assert probes == ["r1", "r1"]


def test_an_answered_probe_resumes_the_run(factory: Factory) -> None:
    run_id = _paused_run(factory)
    done = probe_due_runs(factory, POLICY, lambda _run: None, serves=lambda _run: True)
    assert done.resumed == ("r1",)
    assert _row(factory, run_id) == ("active", None)
    assert _statuses(factory, run_id) == ["pending"] * 3  # for the next sweep to publish
    with session_scope(factory) as s:
        run = s.get(Run, run_id)
        assert run is not None and run.probed_at is None and run.paused_at is None


def test_a_budget_pause_is_never_probed(factory: Factory) -> None:
    run_id = _paused_run(factory, kind="budget")
    done = probe_due_runs(factory, POLICY, lambda _run: None, serves=lambda _run: True)
    assert done.probed == ()
    assert _row(factory, run_id) == ("paused", "budget")


def test_no_probe_after_the_give_up_time_nor_for_runs_not_served(factory: Factory) -> None:
    old = _paused_run(factory, "old", paused_s_ago=120)
    other = _paused_run(factory, "other")
    policy = BreakerPolicy(probe_s=30.0, give_up_s=60.0)
    done = probe_due_runs(factory, policy, lambda _run: None,
                          serves=lambda run: run.name != "other")
    assert done.probed == ()
    assert _row(factory, old) == ("paused", "breaker")
    assert _row(factory, other) == ("paused", "breaker")
    with session_scope(factory) as s:
        assert not take_probe(s, old, now=utcnow(), interval_s=30.0, give_up_s=60.0)
        assert take_probe(s, old, now=utcnow(), interval_s=30.0, give_up_s=None)


def test_probes_off_probe_nothing(factory: Factory) -> None:
    run_id = _paused_run(factory)
    done = probe_due_runs(factory, BreakerPolicy(probe_s=0), lambda _run: None,
                          serves=lambda _run: True)
    assert done.probed == ()
    assert _row(factory, run_id) == ("paused", "breaker")
