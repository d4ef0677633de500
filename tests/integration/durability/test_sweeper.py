"""``sweep_once`` and ``publish_chunks`` against real PostgreSQL and a private Redis (fast)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import timedelta

import orjson
import pytest
from sqlalchemy import select

from app.broker.names import SWEEP_LOCK_ID, TASK_RUN_CHUNK, queue_for
from app.broker.publish import PublishError, RunPublisher, chunk_ids, publish_chunks
from app.runs.sweep import SweepPolicy, sweep_once
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.dialects import advisory_lock
from app.store.models import Decision, DecisionPayload, Run
from app.store.queue import claim_decisions, mark_queued, utcnow
from tests.fixtures.services import RedisServer, free_port
from workers.celery_app import make_celery

QUEUE = queue_for("dgemma", 320)


@pytest.fixture
def factory(pg_url: str) -> Iterator[object]:
    engine = make_engine(pg_url)
    yield make_sessionmaker(engine)
    engine.dispose()


def _seed(factory, n: int) -> list[int]:  # type: ignore[no-untyped-def]
    with session_scope(factory) as s:
        run = Run(name="r", settings={"model": "dgemma", "canvas_length": 320},
                  settings_hash="h", upstream="sim")
        s.add(run)
        s.flush()
        rows = [Decision(run_id=run.id, key=f"d{i}") for i in range(n)]
        s.add_all(rows)
        s.flush()
        s.add_all(DecisionPayload(decision_id=d.id, payload={}) for d in rows)
        return [d.id for d in rows]


def _messages(redis: RedisServer) -> list[dict[str, object]]:
    raw = redis.client().lrange(QUEUE, 0, -1)
    return [orjson.loads(m) for m in raw]


def _chunks(redis: RedisServer) -> list[list[int]]:
    """The decision ids of every queued message (kombu base64-encodes the JSON body)."""
    out = []
    for message in _messages(redis):
        args, _kwargs, _embed = orjson.loads(base64.b64decode(message["body"]))  # type: ignore[arg-type]
        out.append(list(args[1]))
    return out


def _statuses(factory) -> dict[int, str]:  # type: ignore[no-untyped-def]
    with session_scope(factory) as s:
        return dict(s.execute(select(Decision.id, Decision.status)).all())  # type: ignore[arg-type]


def test_chunk_ids_keeps_order_and_size() -> None:
    assert list(chunk_ids([1, 2, 3, 4, 5], 2)) == [(1, 2), (3, 4), (5,)]
    with pytest.raises(ValueError, match="chunk_size"):
        list(chunk_ids([1], 0))


def test_publish_chunks_sends_named_tasks_with_readable_argsrepr(
        redis_server: RedisServer) -> None:
    celery = make_celery(broker_url=redis_server.url)
    assert publish_chunks(celery, 7, list(range(1, 71)), 32, run_name="demo", queue=QUEUE) == 3
    messages = _messages(redis_server)
    assert len(messages) == 3
    headers = [m["headers"] for m in messages]
    assert {h["task"] for h in headers} == {TASK_RUN_CHUNK}  # type: ignore[index]
    assert sorted(h["argsrepr"] for h in headers) == [  # type: ignore[index]
        "run=demo chunk=1 (32 decisions)", "run=demo chunk=2 (32 decisions)",
        "run=demo chunk=3 (6 decisions)"]


def test_a_runs_chunks_are_numbered_across_its_batches(redis_server: RedisServer) -> None:
    """Submit publishes batch by batch through one RunPublisher: Flower's args column counts
    the run's chunks on (1, 2, 3, ...), never from 1 again per batch."""
    celery = make_celery(broker_url=redis_server.url)
    publisher = RunPublisher(celery, 2, run_name="batches", queue=QUEUE)
    assert publisher(7, [1, 2, 3]) == 2
    assert publisher(7, [4]) == 1
    shown = [m["headers"]["argsrepr"] for m in _messages(redis_server)]  # type: ignore[index]
    assert sorted(shown) == ["run=batches chunk=1 (2 decisions)",
                             "run=batches chunk=2 (1 decision)",
                             "run=batches chunk=3 (1 decision)"]


def test_sweep_publishes_pending_isolates_lost_and_waits_for_backlog(
        factory, redis_server: RedisServer) -> None:  # type: ignore[no-untyped-def]
    celery = make_celery(broker_url=redis_server.url)
    ids = _seed(factory, 10)
    with session_scope(factory) as s:
        claim_decisions(s, decision_ids=ids[:2], owner="dead", lease_s=-1)
        mark_queued(s, ids[2:6], now=utcnow() - timedelta(seconds=100))
    report = sweep_once(factory, celery, SweepPolicy(requeue_after_s=50, chunk_size=32))
    assert (report.lost, report.published) == (2, 10)
    # 4 pending, then 4 stale queued (the queue was drained); the 2 lost ones alone
    assert sorted(_chunks(redis_server), key=lambda c: (len(c), c)) == [
        [ids[0]], [ids[1]], ids[2:6], ids[6:]]
    assert set(_statuses(factory).values()) == {"queued"}
    shown = sorted(m["headers"]["argsrepr"] for m in _messages(redis_server))  # type: ignore[index]
    assert shown == ["run=r chunk=1 (4 decisions, sweeper)", "run=r chunk=2 (1 decision, sweeper)",
                     "run=r chunk=3 (1 decision, sweeper)", "run=r chunk=4 (4 decisions, sweeper)"]
    again = sweep_once(factory, celery, SweepPolicy(requeue_after_s=0, chunk_size=32))
    assert again.published == 0 and again.backlog == 4, "a backlog is not a loss"


def test_broker_loss_is_repaired_at_the_next_sweep_in_full(
        factory, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Redis loses every key: the next sweep re-publishes every queued decision at once (no
    requeue window, no cap: paged through the whole run), and only once."""
    monkeypatch.setattr("app.runs.sweep.PAGE", 7)  # several pages
    celery = make_celery(broker_url=redis_server.url)
    ids = _seed(factory, 40)
    first = sweep_once(factory, celery, SweepPolicy(requeue_after_s=600, chunk_size=8))
    assert first.published == 40
    assert sweep_once(factory, celery, SweepPolicy(requeue_after_s=600)).published == 0
    redis_server.wipe()
    report = sweep_once(factory, celery, SweepPolicy(requeue_after_s=600, chunk_size=8))
    assert report.broker_lost and report.published == 40
    assert sorted(i for chunk in _chunks(redis_server) for i in chunk) == ids
    again = sweep_once(factory, celery, SweepPolicy(requeue_after_s=600, chunk_size=8))
    assert again.published == 0 and not again.broker_lost, "repaired once, not every sweep"


def _stamps(factory) -> dict[int, tuple[object, object]]:  # type: ignore[no-untyped-def]
    with session_scope(factory) as s:
        rows = s.execute(select(Decision.id, Decision.enqueued_at, Decision.updated_at))
        return {did: (enq, upd) for did, enq, upd in rows}


def test_broker_loss_recovery_resends_rows_as_they_are(
        factory, redis_server: RedisServer) -> None:  # type: ignore[no-untyped-def]
    """The recovery reads the lost rows and re-sends them: no row is rewritten (a million-row
    run is re-sent at the broker's speed), and they still count as queued."""
    celery = make_celery(broker_url=redis_server.url)
    ids = _seed(factory, 12)
    sweep_once(factory, celery, SweepPolicy(requeue_after_s=600, chunk_size=5))
    before = _stamps(factory)
    redis_server.wipe()
    report = sweep_once(factory, celery, SweepPolicy(requeue_after_s=600, chunk_size=5))
    assert report.broker_lost and (report.published, report.messages) == (12, 3)
    assert sorted(i for chunk in _chunks(redis_server) for i in chunk) == ids
    assert _stamps(factory) == before
    assert set(_statuses(factory).values()) == {"queued"}


class _FailingBroker:
    """The real Celery app, whose broker goes away after ``ok`` messages (fault injection)."""

    def __init__(self, celery: object, ok: int) -> None:
        self._celery, self._left = celery, ok

    def __getattr__(self, name: str) -> object:
        return getattr(self._celery, name)

    def send_task(self, name: str, args: object = None, **options: object) -> object:
        if self._left <= 0:
            raise ConnectionError("broker went away")
        self._left -= 1
        return self._celery.send_task(name, args=args, **options)  # type: ignore[attr-defined]


def test_a_recovery_cut_short_goes_on_where_it_stopped(
        factory, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("app.runs.sweep.PAGE", 8)
    celery = make_celery(broker_url=redis_server.url)
    ids = _seed(factory, 40)
    sweep_once(factory, celery, SweepPolicy(requeue_after_s=600, chunk_size=4))
    redis_server.wipe()
    policy = SweepPolicy(requeue_after_s=600, chunk_size=4)
    cut = sweep_once(factory, _FailingBroker(celery, ok=5), policy)
    assert cut.error and "broker" in cut.error and cut.broker_lost
    assert cut.published == 16, "two whole pages went out before the broker went away"
    rest = sweep_once(factory, celery, SweepPolicy(requeue_after_s=600, chunk_size=4))
    assert rest.broker_lost and rest.published == 24, "the pages sent are not sent again"
    sent = sorted(i for chunk in _chunks(redis_server) for i in chunk)
    assert set(sent) == set(ids)
    # a page's messages go out together, in one Redis pipeline (kombu's Producer.batch): the
    # page that failed sent none of them, and the next sweep sends it once, whole
    assert len(sent) == 40, "no decision is sent twice"
    assert sweep_once(factory, celery, SweepPolicy(requeue_after_s=600)).published == 0


def test_rows_the_recovery_resent_are_stale_only_after_the_requeue_window(
        factory, redis_server: RedisServer) -> None:  # type: ignore[no-untyped-def]
    celery = make_celery(broker_url=redis_server.url)
    _seed(factory, 6)
    sweep_once(factory, celery, SweepPolicy(requeue_after_s=600, chunk_size=6))
    redis_server.wipe()
    six = SweepPolicy(requeue_after_s=600, chunk_size=6)
    assert sweep_once(factory, celery, six).published == 6
    redis_server.client().delete(QUEUE)  # the queue drains, the rows still say queued
    assert sweep_once(factory, celery, SweepPolicy(requeue_after_s=600)).published == 0, (
        "re-sent by the recovery a moment ago: within the window")
    late = sweep_once(factory, celery, SweepPolicy(requeue_after_s=0, chunk_size=6))
    assert late.published == 6 and not late.broker_lost


def test_publish_failure_leaves_rows_for_the_next_sweep(factory) -> None:  # type: ignore[no-untyped-def]
    dead = make_celery(broker_url=f"redis://127.0.0.1:{free_port()}/0")
    dead.conf.broker_connection_timeout = 1
    dead.conf.broker_connection_max_retries = 0
    ids = _seed(factory, 5)
    report = sweep_once(factory, dead, SweepPolicy(chunk_size=2))
    assert report.published == 0 and report.error and "broker" in report.error
    assert set(_statuses(factory).values()) == {"pending"}
    with pytest.raises(PublishError, match="sweeper"):
        publish_chunks(dead, 1, ids, 2)


def test_a_second_sweeper_skips_while_one_sweeps(factory) -> None:  # type: ignore[no-untyped-def]
    _seed(factory, 3)
    with session_scope(factory) as holder, advisory_lock(holder, SWEEP_LOCK_ID, 0) as held:
        assert held
        assert sweep_once(factory, None, SweepPolicy(), wait_lock_s=0).skipped
    assert not sweep_once(factory, None, SweepPolicy(), wait_lock_s=0).skipped
