"""A run of image decisions, distributed: ``dreads submit`` fetches and checks each image once,
a worker answers, is SIGKILLed mid-run, and a new worker finishes. Every decision is answered
once, and the workers fetched each image at most once per attempt, never once per draw (the
images are served by a local HTTP server that counts every request)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from sqlalchemy import func, select

from app.store.db import session_scope
from app.store.models import Attempt, Decision, Draw, Run
from tests.fixtures.images import ImageServer, png
from tests.fixtures.services import ROOT, VENV_BIN, WorkerProcess
from tests.integration.durability.harness import Stack, check_invariant, outcome_counts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

N = 400
DRAWS = 3


def _job(path: Path, server: ImageServer) -> None:
    question = {"red": {"type": "noul", "instructions": "Is the picture mostly red?"}}
    with path.open("wb") as out:
        for i in range(N):
            url = server.add(f"/p/{i}.png", png(i))
            out.write(orjson.dumps({"id": f"p{i}", "cell": f"c{i % 4}", "state": f"Photo {i}.",
                                    "images": [url], "questions": question}) + b"\n")


def _counts(stack: Stack) -> tuple[int, int]:
    """(attempt rows, draw rows) of the run."""
    with session_scope(stack.factory) as s:
        attempts = s.scalar(select(func.count()).select_from(Attempt)
                            .where(Attempt.run_id == stack.run_id))
        draws = s.scalar(select(func.count()).select_from(Draw)
                         .join(Decision, Decision.id == Draw.decision_id)
                         .where(Decision.run_id == stack.run_id))
    return int(attempts or 0), int(draws or 0)


def test_a_killed_worker_s_image_run_resumes_answering_each_decision_once(
        stack: Stack, image_server: ImageServer, tmp_path: Path,
        worker_factory: Callable[..., WorkerProcess]) -> None:
    job = tmp_path / "photos.jsonl"
    _job(job, image_server)
    submitted = subprocess.run(
        [str(VENV_BIN / "dreads"), "submit", str(job), "--run", "photos", "--draws",
         str(DRAWS), "--json"], env={**os.environ, **stack.env()}, cwd=ROOT,
        capture_output=True, text=True, timeout=180)
    assert submitted.returncode == 0, submitted.stderr
    report = orjson.loads(submitted.stdout)
    assert (report["inserted"], report["rejected"], report["published"]) == (N, [], N)
    assert image_server.total() == N  # each image fetched once at submit
    with session_scope(stack.factory) as s:
        stack.run_id = int(s.scalar(select(Run.id).where(Run.name == "photos")) or 0)

    first = worker_factory(stack.env())
    stack.wait_done_at_least(N // 4, timeout_s=120, leased=True)
    first.kill()
    worker_factory(stack.env())
    stack.wait_settled(180)

    check_invariant(stack, n=N)
    outcomes = outcome_counts(stack)
    assert set(outcomes) <= {"ok", "worker_lost"}, outcomes
    fetched = image_server.total() - N
    attempts, draws = _counts(stack)
    assert draws == N * DRAWS
    assert N <= fetched <= attempts, (fetched, attempts, outcomes)
