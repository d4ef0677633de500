"""The breaker in SQL, on PostgreSQL and SQLite: a run whose recent attempts keep failing with
one upstream kind pauses once, claims skip it, an attempt failing after the pause is not
charged, resume starts the count over; rejected decisions and scattered 5xx never trip it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.errors import OutcomeKind
from app.runs.breaker import BreakerPolicy, Failure, Recorded, record_failure
from app.store.breaker import pause_run, unpause_run
from app.store.db import session_scope
from app.store.models import Attempt, Decision, DecisionPayload, Run
from app.store.queue import AttemptInfo, Claimed, claim_decisions, finish_decision, utcnow
from app.store.states import RunState, run_state

Factory = sessionmaker[Session]
POLICY = BreakerPolicy(window=20, threshold=0.9)  # trips at 18 of the last 20


def _seed(factory: Factory, n: int) -> list[int]:
    with session_scope(factory) as s:
        run = Run(name="r1", settings={}, settings_hash="h", upstream="http://m:8001")
        s.add(run)
        s.flush()
        rows = [Decision(run_id=run.id, key=f"d{i}") for i in range(n)]
        s.add_all(rows)
        s.flush()
        s.add_all(DecisionPayload(decision_id=d.id, payload={"state": "s"}) for d in rows)
        return [d.id for d in rows]


def _claim(factory: Factory, ids: list[int]) -> list[Claimed]:
    with session_scope(factory) as s:
        return claim_decisions(s, decision_ids=ids, owner="w", lease_s=60)


def _fail(factory: Factory, claim: Claimed, kind: str = OutcomeKind.SERVER_ERROR,
          permanent: bool = False) -> Recorded:
    failure = Failure(claim=claim, kind=kind, detail="server error 500: boom",
                      permanent=permanent, attempt=AttemptInfo(worker="w"), max_attempts=5)
    with session_scope(factory) as s:
        return record_failure(s, failure, breaker=POLICY, run_name="r1", now=utcnow())


def _ok(factory: Factory, claim: Claimed) -> None:
    with session_scope(factory) as s:
        finish_decision(s, claim=claim, answers=[], draws=[], attempt=AttemptInfo(),
                        question_ids=[])


def _run(factory: Factory) -> Run:
    with session_scope(factory) as s:
        run = s.scalars(select(Run)).one()
        s.expunge(run)
        return run


def test_failures_of_one_kind_pause_the_run_once(factory: Factory) -> None:
    ids = _seed(factory, 40)
    claims = _claim(factory, ids)
    for claim in claims[:2]:
        _ok(factory, claim)
    recorded = [_fail(factory, c) for c in claims[2:20]]
    assert [r.paused for r in recorded[:-1]] == [None] * 17  # 2 ok + 17 failed: no full window
    reason = recorded[-1].paused
    assert reason == ("18 of the last 20 attempts failed with server_error (server error 500: "
                      "boom): check the model server and its logs, then `dreads resume r1`")
    run = _run(factory)
    assert (run.status, run.pause_kind, run.pause_reason) == ("paused", "breaker", reason)
    assert run_state(run.status, {"pending": 20, "done": 2}) is RunState.PAUSED
    with session_scope(factory) as s:
        assert not pause_run(s, run.id, kind="breaker", reason="again", now=utcnow())
    # nothing more is claimed, and what was in flight is not charged when it fails
    assert _claim(factory, ids) == []
    late = _fail(factory, claims[20])
    assert late.uncharged and late.paused is None
    with session_scope(factory) as s:
        row = s.get(Decision, claims[20].id)
        assert row is not None and (row.status, row.attempts) == ("pending", 0)
        kinds = s.scalars(select(Attempt.outcome).where(Attempt.decision_id == row.id)).all()
        assert kinds == [OutcomeKind.PAUSED]


def test_resume_closes_the_breaker_and_starts_the_count_over(factory: Factory) -> None:
    ids = _seed(factory, 60)
    claims = _claim(factory, ids)
    assert [_fail(factory, c).paused is not None for c in claims[:20]] == [False] * 19 + [True]
    with session_scope(factory) as s:
        s.execute(Decision.__table__.update().where(Decision.id.in_(ids[40:]))
                  .values(status="queued"))
        assert unpause_run(s, _run(factory).id)
        assert not unpause_run(s, _run(factory).id)
    run = _run(factory)
    assert (run.status, run.pause_kind, run.pause_reason, run.paused_at) == (
        "active", None, None, None)
    with session_scope(factory) as s:  # their messages were dropped while it was paused
        assert set(s.scalars(select(Decision.status).where(Decision.id.in_(ids[40:])))) \
            == {"pending"}
    # the earlier failures no longer count: a new window must fill first
    assert all(_fail(factory, c).paused is None for c in claims[20:39])
    assert _fail(factory, claims[39]).paused is not None


def test_rejected_decisions_and_scattered_errors_never_trip(factory: Factory) -> None:
    ids = _seed(factory, 200)
    claims = _claim(factory, ids)
    for claim in claims[:60]:  # a window of rejected decisions (permanent input problems)
        assert _fail(factory, claim, OutcomeKind.REJECTED, permanent=True).paused is None
    for i, claim in enumerate(claims[60:]):  # then one server error in ten
        if i % 10 == 0:
            assert _fail(factory, claim).paused is None
        else:
            _ok(factory, claim)
    assert _run(factory).status == "active"


def test_a_disabled_breaker_never_trips(factory: Factory) -> None:
    claims = _claim(factory, _seed(factory, 30))
    failure = Failure(claim=claims[0], kind=OutcomeKind.SERVER_ERROR, detail="x",
                      permanent=False, attempt=AttemptInfo(), max_attempts=5)
    off = BreakerPolicy(window=0)
    assert not off.enabled and not BreakerPolicy(threshold=0).enabled
    for claim in claims:
        with session_scope(factory) as s:
            record_failure(s, Failure(**{**failure.__dict__, "claim": claim}), breaker=off,
                           run_name="r1", now=utcnow())
    assert _run(factory).status == "active"


def test_concurrent_failures_pause_the_run_once(factory: Factory) -> None:
    claims = _claim(factory, _seed(factory, 80))
    for claim in claims[:17]:
        _fail(factory, claim)
    with ThreadPoolExecutor(max_workers=4) as pool:
        recorded = list(pool.map(lambda c: _fail(factory, c), claims[17:41]))
    assert sum(r.paused is not None for r in recorded) == 1
    assert _run(factory).status == "paused"
    # the checks take turns: the window's 20 failures are charged, none after them
    with session_scope(factory) as s:
        outcomes = s.execute(select(Attempt.outcome, func.count()).group_by(Attempt.outcome))
        assert dict(outcomes.all()) == {"server_error": 20, "paused": 21}
