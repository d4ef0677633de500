"""Shared pieces of the durability scenarios: a simulator subprocess, submitting a run in the
producer's order (rows committed already queued, then their messages published to the run's
queue), waiting for it to settle, and the invariants checked in SQL."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.broker.names import queue_of_run
from app.broker.publish import publish_chunks
from app.engine import ReadSettings, settings_hash, settings_to_dict
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.models import Answer, Attempt, Decision, DecisionStatus
from app.store.queue import database_now
from app.store.runs import ensure_run, insert_decisions
from tests.fixtures.job_rows import decision_rows
from tests.fixtures.services import ROOT, VENV_BIN, free_port, wait_until

__all__ = ["Sim", "Stack", "check_invariant", "outcome_counts", "worker_env"]

#: Decisions per scenario run.
N_DECISIONS = 2000


class Sim:
    """``dreads sim`` in a subprocess on a free port, controlled over HTTP."""

    def __init__(self, log_path: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "dreads"), "sim", "--port", str(self.port), "--log-level",
             "warning", *args], cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        wait_until(self._up, timeout_s=60, what="the simulator", interval_s=0.2)

    def _up(self) -> bool:
        try:
            return httpx.get(f"{self.url}/v1/models", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stats(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/sim/stats", timeout=5).json())

    def down(self, seconds: float) -> None:
        httpx.post(f"{self.url}/sim/down", params={"seconds": seconds}, timeout=5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._log.close()


def worker_env(*, database_url: str, broker_url: str, upstream: str,
               **overrides: Any) -> dict[str, str]:
    """Short leases and timeouts so each scenario recovers in seconds."""
    env = {
        "DREADS_DATABASE_URL": database_url, "DREADS_BROKER_URL": broker_url,
        "DREADS_UPSTREAM": upstream, "DREADS_LEASE_S": "6", "DREADS_SWEEP_INTERVAL_S": "1",
        "DREADS_REQUEUE_AFTER_S": "8", "DREADS_MAX_ATTEMPTS": "5",
        "DREADS_VISIBILITY_TIMEOUT_S": "120", "DREADS_TASK_TIME_LIMIT_S": "60",
        "DREADS_READ_RETRIES": "0", "DREADS_READ_TIMEOUT_S": "10", "DREADS_CHUNK_SIZE": "32",
        "DREADS_MAX_IN_FLIGHT": "64",
    }
    env.update({f"DREADS_{k.upper()}": str(v) for k, v in overrides.items()})
    return env


@dataclass
class Stack:
    """A database and a broker, and the run submitted to them."""

    database_url: str
    broker_url: str
    upstream: str
    engine: Engine
    factory: sessionmaker[Session]
    run_id: int = 0

    @classmethod
    @contextlib.contextmanager
    def open(cls, database_url: str, broker_url: str, upstream: str) -> Iterator[Stack]:
        engine = make_engine(database_url)
        try:
            yield cls(database_url, broker_url, upstream, engine, make_sessionmaker(engine))
        finally:
            engine.dispose()

    def env(self, **overrides: Any) -> dict[str, str]:
        base: dict[str, Any] = {"database_url": self.database_url,
                                "broker_url": self.broker_url, "upstream": self.upstream}
        return worker_env(**(base | overrides))

    def submit(self, n: int = N_DECISIONS, *, name: str = "durable",
               settings: ReadSettings | None = None, chunk_size: int = 32,
               prefix: str = "d") -> int:
        """Write ``n`` decisions already queued, commit, then publish them to the run's queue
        (the producer's order)."""
        from app.broker.publish import broker_epoch
        from workers.celery_app import make_celery

        settings = settings or ReadSettings()
        celery = make_celery(broker_url=self.broker_url)
        with session_scope(self.factory) as s:
            run, _ = ensure_run(s, name=name, settings=settings_to_dict(settings),
                                settings_hash=settings_hash(settings), upstream=self.upstream,
                                engine="vllm", source="job.jsonl", replicates=1,
                                fingerprint=None)
            broker_epoch(celery, database_now(s).timestamp())
            inserted = insert_decisions(s, run.id, decision_rows(n, prefix=prefix),
                                        status=DecisionStatus.QUEUED)
        ids = sorted(rid for rid, _ in inserted)
        assert len(ids) == n
        publish_chunks(celery, run.id, ids, chunk_size, run_name=name,
                       queue=queue_of_run(settings_to_dict(settings)))
        celery.close()
        self.run_id = run.id
        return self.run_id

    def counts(self) -> dict[str, int]:
        with session_scope(self.factory) as s:
            rows = s.execute(select(Decision.status, func.count())
                             .where(Decision.run_id == self.run_id)
                             .group_by(Decision.status)).all()
        return {status: int(n) for status, n in rows}

    def done(self) -> int:
        return self.counts().get("done", 0)

    def wait_settled(self, timeout_s: float, *, settled: Callable[[dict[str, int]], bool]
                     | None = None, interval_s: float = 0.5) -> dict[str, int]:
        """Wait until no decision is pending, queued or leased (or ``settled(counts)``)."""
        def ok() -> bool:
            counts = self.counts()
            if settled is not None:
                return settled(counts)
            return not any(counts.get(k) for k in ("pending", "queued", "leased"))

        wait_until(ok, timeout_s=timeout_s, what=f"run {self.run_id} to settle "
                   f"({self.counts()})", interval_s=interval_s)
        return self.counts()

    def wait_done_at_least(self, n: int, timeout_s: float, *, leased: bool = False) -> None:
        """Wait for ``n`` decisions done (and, with ``leased``, some held right now: a worker
        between two chunks holds none, and a kill then would leave nothing to recover)."""
        def ok() -> bool:
            counts = self.counts()
            return counts.get("done", 0) >= n and (not leased or counts.get("leased", 0) > 0)

        wait_until(ok, timeout_s=timeout_s, interval_s=0.05 if leased else 0.2,
                   what=f"{n} decisions done" + (" with leases held" if leased else ""))


def outcome_counts(stack: Stack) -> dict[str, int]:
    with session_scope(stack.factory) as s:
        rows = s.execute(select(Attempt.outcome, func.count())
                         .where(Attempt.run_id == stack.run_id)
                         .group_by(Attempt.outcome)).all()
    return {kind: int(n) for kind, n in rows}


def check_invariant(stack: Stack, *, n: int, not_done: int = 0) -> dict[str, int]:
    """Every decision done exactly once (but ``not_done``), one answer per question, no
    duplicate answer, exactly one winning ok attempt per done decision."""
    counts = stack.counts()
    assert counts.get("done", 0) == n - not_done, counts
    with session_scope(stack.factory) as s:
        run = Decision.run_id == stack.run_id
        questions = s.scalar(select(func.sum(Decision.n_questions))
                             .where(run, Decision.status == "done"))
        answers = s.scalar(select(func.count()).select_from(Answer)
                           .where(Answer.run_id == stack.run_id))
        assert answers == questions, (answers, questions)
        duplicates = s.execute(select(Answer.decision_id, Answer.question_id)
                               .where(Answer.run_id == stack.run_id)
                               .group_by(Answer.decision_id, Answer.question_id)
                               .having(func.count() > 1)).all()
        assert duplicates == []
        winners = s.execute(select(Attempt.decision_id, func.count())
                            .where(Attempt.run_id == stack.run_id, Attempt.won)
                            .group_by(Attempt.decision_id)).all()
        assert len(winners) == n - not_done and all(c == 1 for _, c in winners)
        orphans = s.scalar(select(func.count()).select_from(Answer).join(
            Attempt, Answer.attempt_id == Attempt.id).where(
            Answer.run_id == stack.run_id, ~Attempt.won))
        assert orphans == 0, "every kept answer comes from the winning attempt"
    return counts


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")
