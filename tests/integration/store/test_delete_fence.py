"""``delete_run`` while a worker commits answers of the run (``delete --force``): the delete
waits for the commit in flight and removes what it wrote; a commit that comes after the
delete is a conflict to retry, never a database to check."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from app.errors import StoreConflict
from app.store.admin import delete_run
from app.store.db import session_scope
from app.store.models import Answer, Attempt, Decision, DecisionPayload, Run
from app.store.queue import AttemptInfo, claim_decisions, finish_decision
from tests.integration.store.test_queue import _answer, _draw

Factory = sessionmaker[Session]
#: How long a transaction that must wait is given before the test says it did not.
_WAITS_S = 0.8


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as executor:
        yield executor


def _run_with_claims(factory: Factory) -> tuple[int, list]:  # type: ignore[type-arg]
    with session_scope(factory) as s:
        run = Run(name="doomed", status="active", settings={}, settings_hash="h",
                  upstream="sim")
        s.add(run)
        s.flush()
        rows = [Decision(run_id=run.id, key=f"d{i}", n_questions=2) for i in range(2)]
        s.add_all(rows)
        s.flush()
        s.add_all(DecisionPayload(decision_id=d.id, payload={"state": "s"}) for d in rows)
        run_id, ids = run.id, [d.id for d in rows]
    with session_scope(factory) as s:
        return run_id, claim_decisions(s, decision_ids=ids, owner="w", lease_s=60)


def _commit_answers(factory: Factory, claim, hold: threading.Event | None = None,  # type: ignore[no-untyped-def]
                    started: threading.Event | None = None) -> None:
    """A worker's commit of one answered decision; held open until ``hold`` is set."""
    with session_scope(factory, what="commit") as s:
        finish_decision(s, claim=claim, answers=[_answer("a"), _answer("b")],
                        draws=[_draw(0), _draw(1)], attempt=AttemptInfo(worker="w"),
                        question_ids=["a", "b"])
        if started is not None:
            started.set()
        if hold is not None:
            assert hold.wait(10)


def _delete(factory: Factory, run_id: int, *, hold: threading.Event | None = None,
            started: threading.Event | None = None) -> None:
    with session_scope(factory, what="delete") as s:
        delete_run(s, run_id)
        if started is not None:
            started.set()
        if hold is not None:
            assert hold.wait(10)


def _count(factory: Factory, model: type) -> int:
    with session_scope(factory) as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def _waiting_statements(factory: Factory) -> list[str]:
    """The beginnings of the statements waiting for a lock in this database."""
    with session_scope(factory) as s:
        rows = s.execute(text(
            "SELECT query FROM pg_stat_activity WHERE datname = current_database() AND "
            "wait_event_type = 'Lock'")).scalars().all()
    return [" ".join(str(q).split()[:2]) for q in rows]


def _still_waiting(future: Future[None]) -> bool:
    time.sleep(_WAITS_S)
    return not future.done()


def test_delete_waits_for_a_commit_in_flight_and_removes_what_it_wrote(
        factory: Factory, pool: ThreadPoolExecutor) -> None:
    run_id, claims = _run_with_claims(factory)
    hold, started = threading.Event(), threading.Event()
    commit = pool.submit(_commit_answers, factory, claims[0], hold, started)
    assert started.wait(10)
    deleting = pool.submit(_delete, factory, run_id)
    if factory.kw["bind"].dialect.name == "postgresql":
        assert _still_waiting(deleting)  # fenced: the commit is still open
        # it waits before its first delete (a commit between two of its deletes would
        # leave an answer whose attempt it deleted: a foreign-key error)
        assert _waiting_statements(factory) == ["SELECT runs.id"]
    hold.set()
    commit.result(timeout=10)
    deleting.result(timeout=20)  # no foreign-key error: it removed the commit's rows too
    assert [_count(factory, m) for m in (Run, Decision, Attempt, Answer)] == [0, 0, 0, 0]


def test_a_commit_after_the_delete_is_a_conflict_to_retry_not_a_database_to_check(
        factory: Factory, pool: ThreadPoolExecutor) -> None:
    run_id, claims = _run_with_claims(factory)
    hold, started = threading.Event(), threading.Event()
    deleting = pool.submit(_delete, factory, run_id, hold=hold, started=started)
    assert started.wait(10)
    commit = pool.submit(_commit_answers, factory, claims[1])
    if factory.kw["bind"].dialect.name == "postgresql":
        assert _still_waiting(commit)  # held back until the delete ends
    hold.set()
    deleting.result(timeout=10)
    with pytest.raises(StoreConflict) as caught:
        commit.result(timeout=20)
    assert "check --database-url" not in caught.value.message
    assert "try again" in caught.value.message
    assert [_count(factory, m) for m in (Run, Decision, Attempt, Answer)] == [0, 0, 0, 0]
