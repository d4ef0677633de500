"""The lease protocol against real PostgreSQL and SQLite: claim, renew, finish, fail, expire."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.engine.types import Answer as EngineAnswer
from app.engine.types import DrawRecord, Refusal, SlotRead, StopReason
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.models import Answer, Attempt, Decision, DecisionPayload, Draw, Run
from app.store.queue import (
    AttemptInfo,
    Finished,
    claim_decisions,
    expire_leases,
    fail_decision,
    finish_decision,
    finish_decisions,
    release_unserved,
    renew_leases,
    utcnow,
)
from app.store.runs import open_runs

Factory = sessionmaker[Session]


def _seed(factory: Factory, n: int = 4, *, run_status: str = "active",
          name: str = "r1") -> list[int]:
    with session_scope(factory) as s:
        run = Run(name=name, status=run_status, settings={}, settings_hash="h", upstream="sim")
        s.add(run)
        s.flush()
        rows = [Decision(run_id=run.id, key=f"d{i}", n_questions=2) for i in range(n)]
        s.add_all(rows)
        s.flush()
        s.add_all(DecisionPayload(decision_id=d.id, payload={"state": "s"}) for d in rows)
        return [d.id for d in rows]


def _answer(qid: str, label: str = "yes") -> EngineAnswer:
    return EngineAnswer(
        question_id=qid, question_type="noul", label=label, option=label,
        probs={"yes": 0.8, "no": 0.2}, p_yes=0.8, expected_level=None, legend=None,
        confidence=0.3, top_prob=0.8, stderr=None, agreement=None, draws=1,
        stop_reason=StopReason.NEAR_CERTAIN, label_mass=0.99, min_label_mass=0.99,
        argmax_is_label=True, entropy=0.5)


def _draw(qi: int) -> DrawRecord:
    read = SlotRead(question_index=qi, draw=0, probs=(0.8, 0.2), label_logprobs=(-0.2, -1.6),
                    label_mass=0.99, entropy=0.5, argmax_id=7, argmax_is_label=True)
    return DrawRecord(unit=qi, draw=0, seed=123, read=read, latency_ms=1.0, prompt_tokens=10,
                      cached_tokens=None)


def _finish(factory: Factory, claim, label: str = "yes") -> bool:  # type: ignore[no-untyped-def]
    with session_scope(factory) as s:
        return finish_decision(s, claim=claim, answers=[_answer("a", label), _answer("b", label)],
                               draws=[_draw(0), _draw(1)], attempt=AttemptInfo(worker="w"),
                               question_ids=["a", "b"], expected={"a": "yes"})


def _claim(factory: Factory, ids: list[int], owner: str = "w1", lease_s: float = 60,
           **kw):  # type: ignore[no-untyped-def]
    with session_scope(factory) as s:
        return claim_decisions(s, decision_ids=ids, owner=owner, lease_s=lease_s, **kw)


def _status(factory: Factory, did: int) -> str:
    with session_scope(factory) as s:
        return s.get_one(Decision, did).status


def _outcomes(factory: Factory) -> list[str]:
    with session_scope(factory) as s:
        return sorted(s.scalars(select(Attempt.outcome)))


def test_claim_wins_each_decision_once(factory: Factory) -> None:
    ids = _seed(factory)
    first = _claim(factory, ids[:3])
    assert [c.id for c in first] == ids[:3]
    assert all(c.attempts == 1 and c.lease_token for c in first)
    again = _claim(factory, ids, owner="w2")
    assert [c.id for c in again] == [ids[3]], "held decisions must not be claimed again"
    assert _status(factory, ids[0]) == "leased"


def test_expired_lease_is_taken_over_recorded_and_old_token_cannot_renew(
        factory: Factory) -> None:
    ids = _seed(factory, 2)
    (old,) = _claim(factory, ids[:1], lease_s=-1)  # already expired
    new, fresh = _claim(factory, ids, owner="w2")
    assert new.lease_token != old.lease_token and new.attempts == 2
    assert fresh.attempts == 1
    with session_scope(factory) as s:  # the lost claim has its attempt row, as a sweep gives
        lost = s.execute(select(Attempt.decision_id, Attempt.outcome, Attempt.worker,
                                Attempt.lease_token)).all()
    assert [tuple(r) for r in lost] == [(ids[0], "worker_lost", "w1", old.lease_token)]
    with session_scope(factory) as s:
        assert renew_leases(s, claims=[old], lease_s=60) == set()
        assert renew_leases(s, claims=[new], lease_s=60) == {ids[0]}


def test_claim_skips_cancelled_runs_and_capped_decisions(factory: Factory) -> None:
    cancelled = _seed(factory, 2, run_status="cancelled", name="rc")
    assert _claim(factory, cancelled) == []
    ids = _seed(factory, 1, name="r2")
    assert _claim(factory, ids, lease_s=-1, max_attempts=1)
    assert _claim(factory, ids, max_attempts=1) == [], "the attempt cap stops new claims"


def test_finish_records_everything_and_first_finished_attempt_wins(factory: Factory) -> None:
    ids = _seed(factory, 1)
    (stale,) = _claim(factory, ids, lease_s=-1)
    (current,) = _claim(factory, ids, owner="w2")
    assert _finish(factory, stale, "yes") is True, "a stale holder that finishes first wins"
    assert _finish(factory, current, "no") is False
    with session_scope(factory) as s:
        labels = s.execute(select(Answer.question_id, Answer.label, Answer.expected)
                           .order_by(Answer.question_id)).all()
        assert [tuple(r) for r in labels] == [("a", "yes", "yes"), ("b", "yes", None)]
        attempts = s.execute(select(Attempt.outcome, Attempt.won).order_by(Attempt.id)).all()
        assert [tuple(r) for r in attempts] == [("worker_lost", False), ("ok", True),
                                                ("ok", False)]
        assert s.scalar(select(func.count()).select_from(Draw)) == 4
        decision = s.get_one(Decision, ids[0])
        assert decision.status == "done" and decision.finished_at is not None


def test_a_group_of_finished_attempts_is_recorded_as_each_would_be_alone(
        factory: Factory) -> None:
    """``finish_decisions``: one statement per table for all of them, and each attempt is
    kept or not exactly as ``finish_decision`` would have decided: a decision answered
    before loses, one whose every question was refused wins by being first."""
    ids = _seed(factory, 3)
    (early,) = _claim(factory, ids[:1], lease_s=-1)
    assert _finish(factory, early, "yes") is True  # decision 0 is answered already
    with session_scope(factory) as s:
        s.execute(update(Decision).where(Decision.id == ids[0]).values(status="queued"))
    claims = _claim(factory, ids, owner="w2")
    answered = [_answer("a", "no"), _answer("b", "no")]
    group = [
        Finished(claim=claims[0], answers=answered, draws=[_draw(0), _draw(1)],
                 attempt=AttemptInfo(worker="w2"), question_ids=["a", "b"]),
        Finished(claim=claims[1], answers=answered, draws=[_draw(0)],
                 attempt=AttemptInfo(worker="w2"), question_ids=["a", "b"],
                 expected={"a": "no"}),
        Finished(claim=claims[2], answers=[], draws=[], attempt=AttemptInfo(worker="w2"),
                 question_ids=["a", "b"], refusals=[Refusal("a", "no"), Refusal("b", "no")]),
    ]
    with session_scope(factory) as s:
        assert finish_decisions(s, group) == [False, True, True]
    with session_scope(factory) as s:
        answers = s.execute(select(Answer.decision_id, Answer.label, Answer.expected)
                            .order_by(Answer.decision_id, Answer.question_id)).all()
        attempts = s.execute(select(Attempt.decision_id, Attempt.outcome, Attempt.won)
                             .where(Attempt.worker == "w2").order_by(Attempt.id)).all()
        statuses = s.execute(select(Decision.id, Decision.status)).all()
        draws = s.execute(select(Draw.decision_id, func.count()).group_by(Draw.decision_id)
                          .order_by(Draw.decision_id)).all()
    assert [tuple(r) for r in answers] == [(ids[0], "yes", "yes"), (ids[0], "yes", None),
                                           (ids[1], "no", "no"), (ids[1], "no", None)]
    assert [tuple(r) for r in attempts] == [
        (ids[0], "ok", False), (ids[1], "ok", True), (ids[2], "ok", True),
        (ids[2], "refused", False), (ids[2], "refused", False)]
    assert {did: status for did, status in statuses} == dict.fromkeys(ids, "done")
    assert [tuple(r) for r in draws] == [(ids[0], 4), (ids[1], 1)]


def test_fail_transient_permanent_and_cap(factory: Factory) -> None:
    ids = _seed(factory, 3)
    a, b, c = _claim(factory, ids, max_attempts=5)
    with session_scope(factory) as s:
        assert fail_decision(s, claim=a, kind="server_error", detail="500", permanent=False,
                             max_attempts=5) == "pending"
        assert fail_decision(s, claim=b, kind="bad_request", detail="400: bad field",
                             permanent=True) == "rejected"
        assert fail_decision(s, claim=c, kind="timeout", detail="slow", permanent=False,
                             max_attempts=1) == "failed"
        assert fail_decision(s, claim=a, kind="timeout", detail="again", permanent=False) is None
        assert s.get_one(Decision, ids[1]).last_error == "400: bad field"
    assert _outcomes(factory) == ["bad_request", "server_error", "timeout", "timeout"]
    assert [c.id for c in _claim(factory, ids)] == [ids[0]], "only the pending one is claimable"


def test_expired_leases_go_back_to_pending_and_fail_as_poison_at_the_cap(
        factory: Factory) -> None:
    lost, capped, held, pending = _seed(factory, 4)
    _claim(factory, [lost], lease_s=-1)
    _claim(factory, [capped], lease_s=-1, max_attempts=1)
    _claim(factory, [held], lease_s=60)
    with session_scope(factory) as s:
        result = expire_leases(s, now=utcnow(), max_attempts=2)
    # `capped` was claimed once with a cap of 1, but the sweep's cap is 2: lost, not poisoned.
    assert (result.lost, result.poisoned) == (2, 0)
    assert (_status(factory, lost), _status(factory, capped)) == ("pending", "pending")
    assert (_status(factory, held), _status(factory, pending)) == ("leased", "pending")
    assert len(_claim(factory, [lost], lease_s=-1)) == 1
    with session_scope(factory) as s:
        result = expire_leases(s, now=utcnow(), max_attempts=2)
    assert result.poisoned == 1 and _status(factory, lost) == "failed"
    assert _outcomes(factory).count("poison") == 1
    assert _outcomes(factory).count("worker_lost") == 2


def test_expire_leases_takes_a_page_at_a_time(factory: Factory) -> None:
    ids = _seed(factory, 5)
    _claim(factory, ids, lease_s=-1)
    with session_scope(factory) as s:
        first = expire_leases(s, now=utcnow(), limit=3)
    with session_scope(factory) as s:
        rest = expire_leases(s, now=utcnow(), limit=3)
    assert (first.lost, rest.lost) == (3, 2)


def test_the_sweeper_visits_no_cancelled_run(factory: Factory) -> None:
    _seed(factory, 3, run_status="cancelled", name="rc")
    _seed(factory, 2, name="ra")
    with session_scope(factory) as s:
        assert [r.name for r in open_runs(s)] == ["ra"]


def test_concurrent_claims_and_finishes_never_double(
        make_database: Callable[..., str]) -> None:
    """PostgreSQL under real concurrency: 8 threads race for the same 40 decisions."""
    engine = make_engine(make_database("postgresql"), pool_size=8)
    factory = make_sessionmaker(engine)
    ids = _seed(factory, 40)

    def work(owner: str) -> int:
        won = 0
        for claim in _claim(factory, ids, owner=owner, lease_s=-1):
            won += _finish(factory, claim)
        return won

    with ThreadPoolExecutor(8) as pool:
        wins = sum(pool.map(work, [f"w{i}" for i in range(8)]))
    with session_scope(factory) as s:
        assert s.scalar(select(func.count()).select_from(Answer)) == 80
        assert s.scalar(select(func.count(func.distinct(Attempt.decision_id)))
                        .where(Attempt.won)) == 40
    assert wins == 40
    engine.dispose()


def test_release_unserved_is_not_charged(factory: Factory) -> None:
    """The worker's upstream does not serve the run's model: back to pending, the claim not
    counted against the attempt cap, a not_served attempt row saying so."""
    ids = _seed(factory, 1)
    (claim,) = _claim(factory, ids, max_attempts=1)
    with session_scope(factory) as s:
        assert release_unserved(s, claim=claim, detail="404: The model `x` does not exist.")
        decision = s.get_one(Decision, ids[0])
        assert (decision.status, decision.attempts) == ("pending", 0)
    assert _outcomes(factory) == ["not_served"]
    assert [c.id for c in _claim(factory, ids, max_attempts=1)] == ids, "still claimable"
