"""What ``status``, ``cancel`` and ``delete`` tell a user, on real PostgreSQL and SQLite: the
rate over the time the run has actually worked, the reasons decisions failed, what a cancel
left in flight, and a delete that removes everything of one run and nothing of another."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.engine import ReadSettings, settings_hash, settings_to_dict
from app.store.admin import cancel_not_started, delete_run, run_contents, settle_cancelled
from app.store.db import session_scope
from app.store.models import Attempt, Decision, DecisionPayload, Run
from app.store.runs import DecisionRow, RunInfo, ensure_run, insert_decisions, require_run
from app.store.views import (
    failure_reasons,
    iter_export,
    list_runs,
    run_status,
    status_by_cell,
    status_counts,
)

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def _run(factory: sessionmaker[Session], name: str, n: int) -> tuple[RunInfo, list[int]]:
    settings = ReadSettings()
    payload = {"state": "s", "questions": {"q": {"type": "noul", "instructions": "ok?"}}}
    with session_scope(factory) as session:
        run, _ = ensure_run(session, name=name, settings=settings_to_dict(settings),
                            settings_hash=settings_hash(settings), upstream="http://x",
                            engine="vllm", source=None, replicates=1, fingerprint=None)
        rows = [DecisionRow(key=f"{name}{i}", replicate=0, cell="c", line_no=i + 1,
                            payload=payload, n_questions=1) for i in range(n)]
        ids = sorted(rid for rid, _ in insert_decisions(session, run.id, rows))
    return run, ids


def _finish(factory: sessionmaker[Session], run: RunInfo, ids: list[int], *,
            started: datetime, spread_s: float) -> None:
    """Each decision done, its attempt started at ``started`` + i * spread / n."""
    with session_scope(factory) as session:
        for i, did in enumerate(ids):
            at = started + timedelta(seconds=spread_s * (i + 1) / len(ids))
            session.execute(insert(Attempt).values(
                run_id=run.id, decision_id=did, outcome="ok", won=True, n_reads=1,
                started_at=at - timedelta(seconds=0.1), ended_at=at))
            session.execute(update(Decision).where(Decision.id == did)
                            .values(status="done", finished_at=at))


@pytest.mark.parametrize(("total", "done", "ran_s", "finished", "rate", "eta_s"), [
    # 100 decisions in the 10 s a young run has run: 10/s, not 100 / 60 s = 1.67/s
    (600, 100, 10.0, (100, 100), 10.0, 50.0),
    # a run busy for 10 minutes is measured over the whole window
    (700, 600, 600.5, (60, 300), 1.0, 100.0),
])
def test_the_rate_counts_the_seconds_the_run_has_worked(
        factory: sessionmaker[Session], total: int, done: int, ran_s: float,
        finished: tuple[int, int], rate: float, eta_s: float) -> None:
    run, ids = _run(factory, "r", total)
    _finish(factory, run, ids[:done], started=NOW - timedelta(seconds=ran_s),
            spread_s=round(ran_s))
    with session_scope(factory) as session:
        report = run_status(session, require_run(session, "r"), now=NOW)
    assert (report.finished_1m, report.finished_5m) == finished
    assert report.rate_per_s == pytest.approx(rate, rel=0.05)
    assert report.eta_s == pytest.approx(eta_s, rel=0.05)


def test_failure_reasons_are_grouped_with_their_numbers_aside(
        factory: sessionmaker[Session]) -> None:
    run, ids = _run(factory, "why", 6)
    reasons = ["prompt of 2,949,288 tokens, max context 8192",
               "prompt of 10,007 tokens, max context 8192",
               "prompt of 9,000 tokens, max context 8192",
               "label 'maybe' is 2 tokens"]
    with session_scope(factory) as session:
        for did, reason in zip(ids, reasons, strict=False):
            session.execute(update(Decision).where(Decision.id == did).values(
                status="rejected", last_error_kind="bad_request", last_error=reason))
        session.execute(update(Decision).where(Decision.id == ids[4]).values(
            status="failed", last_error_kind="timeout", last_error="no answer in 60 s"))
        groups = failure_reasons(session, run.id)
        report = run_status(session, require_run(session, "why"), now=NOW)
    assert [(g.kind, g.count) for g in groups] == [("bad_request", 3), ("bad_request", 1),
                                                   ("timeout", 1)]
    assert groups[0].example in reasons[:3]
    assert report.as_dict()["reasons"][0]["count"] == 3


def test_cancel_says_what_it_cancelled_and_what_was_in_flight(
        factory: sessionmaker[Session]) -> None:
    run, ids = _run(factory, "stop", 10)
    with session_scope(factory) as session:
        session.execute(update(Decision).where(Decision.id.in_(ids[:3])).values(
            status="leased", lease_token="t", lease_expires_at=datetime.now(UTC)
            + timedelta(minutes=2)))
        session.execute(update(Decision).where(Decision.id == ids[3]).values(
            status="leased", lease_token="t", lease_expires_at=datetime.now(UTC)
            - timedelta(minutes=2)))  # its worker is gone: nobody will finish it
        session.execute(update(Decision).where(Decision.id == ids[4]).values(status="done"))
        outcome = cancel_not_started(session, run.id)
    assert (outcome.cancelled, outcome.in_flight) == (6, 3)
    with session_scope(factory) as session:
        report = run_status(session, require_run(session, "stop"), now=NOW)
    assert report.counts == {"cancelled": 6, "leased": 3, "done": 1}
    assert report.run.status == "cancelled"


def test_a_cancelled_run_is_cancelled_in_every_view_before_its_rows_are_settled(
        factory: sessionmaker[Session]) -> None:
    """cancel marks the run and leaves its not-started rows to the sweeper's pages: status,
    the per-cell counts, the run list and the export say cancelled from the first moment,
    and settling (a page at a time) changes none of what they say."""
    run, ids = _run(factory, "big", 25)
    _run(factory, "other", 3)
    with session_scope(factory) as session:
        session.execute(update(Decision).where(Decision.id.in_(ids[:5])).values(status="queued"))
        assert cancel_not_started(session, run.id).cancelled == 25

    def seen() -> tuple[Any, ...]:
        with session_scope(factory) as session:
            return (status_counts(session, run.id), status_by_cell(session, run.id),
                    {o.run.name: o.counts for o in list_runs(session)},
                    {r["status"] for r in iter_export(session, run.id)})

    before = seen()
    assert before == ({"cancelled": 25}, {("c", "cancelled"): 25},
                      {"big": {"cancelled": 25}, "other": {"pending": 3}}, {"cancelled"})
    with session_scope(factory) as session:
        raw = session.scalar(select(func.count()).where(Decision.run_id == run.id,
                                                        Decision.status == "cancelled"))
        assert raw == 0  # nothing rewritten yet
        assert settle_cancelled(session, limit=10) == 10
    with session_scope(factory) as session:
        assert settle_cancelled(session, limit=100) == 15
        assert settle_cancelled(session, limit=100) == 0  # the other run is untouched
        rows = session.execute(select(Decision.status, Decision.finished_at)
                               .where(Decision.run_id == run.id)).all()
    assert {status for status, _ in rows} == {"cancelled"}
    assert all(finished is not None for _, finished in rows)
    assert seen() == before


def test_delete_removes_one_run_and_everything_it_recorded(
        factory: sessionmaker[Session]) -> None:
    gone, gone_ids = _run(factory, "gone", 5)
    kept, kept_ids = _run(factory, "kept", 4)
    _finish(factory, gone, gone_ids, started=NOW, spread_s=5)
    _finish(factory, kept, kept_ids, started=NOW, spread_s=5)
    with session_scope(factory) as session:
        contents = run_contents(session, gone.id)
        delete_run(session, gone.id)
    assert (contents.decisions, contents.attempts, contents.in_flight) == (5, 5, 0)
    with session_scope(factory) as session:
        assert session.scalars(select(Run.name)).all() == ["kept"]
        assert session.scalar(select(func.count()).select_from(Decision)) == 4
        assert session.scalar(select(func.count()).select_from(Attempt)) == 4
        # payloads have no foreign key (no cascade): delete_run removes them itself
        assert session.scalars(select(DecisionPayload.decision_id)).all() == sorted(kept_ids)
