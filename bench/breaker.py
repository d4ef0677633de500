"""The breaker under a failing model server: how fast a run pauses, and what it charged.

    python bench/breaker.py                  # 20,000 decisions, 2 workers (a minute or two)
    python bench/breaker.py -n 5000 --fault-after 0.1

Submits ``-n`` one-question decisions into a new database on the PostgreSQL at ``--pg`` and a
private Redis, starts ``--workers`` ``dreads worker`` processes (one pool process each, every
other setting at its default: 4 read retries with backoff, the breaker's window of 50 at 90%)
against ``dreads sim``, and once ``--fault-after`` of the decisions are done turns the
simulator to 503 on every model route (``POST /sim/down``). It prints the seconds from the
fault to the run's pause (``runs.status`` paused, polled every 50 ms), the attempts charged
to decisions after the fault (failed attempts of the upstream's kinds: each is one of a
decision's ``DREADS_MAX_ATTEMPTS``) and those put back uncharged because they failed after
the pause, the reads the simulator refused, and, after ``POST /sim/up`` and ``dreads resume``,
the seconds to finish the run, every decision answered once.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.runs.breaker import TRIPPING  # noqa: E402
from app.store.db import session_scope  # noqa: E402
from app.store.models import Attempt, Decision, Run  # noqa: E402
from tests.fixtures.services import (  # noqa: E402
    VENV_BIN,
    RedisServer,
    WorkerProcess,
    create_pg_database,
    drop_pg_database,
    wait_until,
)
from tests.integration.durability.harness import Sim, Stack, check_invariant  # noqa: E402


def _worker_env(stack: Stack) -> dict[str, str]:
    """Every setting at its default but where the run's services are."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREADS_")}
    return {**env, "DREADS_DATABASE_URL": stack.database_url,
            "DREADS_BROKER_URL": stack.broker_url, "DREADS_UPSTREAM": stack.upstream,
            "PYTHONUNBUFFERED": "1"}


def _run_status(stack: Stack) -> str:
    with session_scope(stack.factory) as s:
        return str(s.scalar(select(Run.status).where(Run.id == stack.run_id)))


def _attempts(stack: Stack, kinds: set[str]) -> tuple[int, int]:
    """(attempts of these kinds, decisions they were charged to)."""
    with session_scope(stack.factory) as s:
        row = s.execute(select(func.count(), func.count(func.distinct(Attempt.decision_id)))
                        .where(Attempt.run_id == stack.run_id,
                               Attempt.outcome.in_(list(kinds)))).one()
    return int(row[0]), int(row[1])


def _charged_total(stack: Stack) -> int:
    with session_scope(stack.factory) as s:
        return int(s.scalar(select(func.sum(Decision.attempts))
                            .where(Decision.run_id == stack.run_id)) or 0)


def measure(stack: Stack, sim: Sim, tmp: Path, n: int, workers: int,
            fault_after: float) -> None:
    started = [WorkerProcess([str(VENV_BIN / "dreads"), "worker", "-c", "1", "-n",
                              f"breaker{i}-{time.monotonic_ns()}@%h", "--loglevel", "WARNING"],
                             _worker_env(stack), tmp / f"worker{i}.log") for i in range(workers)]
    try:
        stack.submit(n, name="breaker", chunk_size=64)
        stack.wait_done_at_least(int(n * fault_after), timeout_s=1800)
        done_before = stack.done()
        sim.down(3600)
        fault_at = time.monotonic()
        wait_until(lambda: _run_status(stack) == "paused", timeout_s=600, interval_s=0.05,
                   what="the run to pause")
        to_pause = time.monotonic() - fault_at
        time.sleep(30)  # the attempts in flight end (their read retries back off)
        charged, decisions = _attempts(stack, set(TRIPPING))
        uncharged, _ = _attempts(stack, {"paused"})
        refused = sim.stats()["down_503"]
        print(f"decisions: {n:,}, workers: {workers}, fault after {done_before:,} done")
        print(f"fault start -> paused:          {to_pause:.2f} s")
        print(f"attempts charged after the fault: {charged} (to {decisions} decisions)")
        print(f"attempts failed after the pause:  {uncharged} (not charged)")
        print(f"reads refused by the simulator:   {refused:,}")
        print(f"open decisions left to resume:    {n - stack.done():,}")
        sim.down(0)
        t0 = time.monotonic()
        resumed = subprocess.run([str(VENV_BIN / "dreads"), "resume", "breaker"],
                                 env=_worker_env(stack), capture_output=True, text=True,
                                 timeout=600)
        assert resumed.returncode == 0, resumed.stderr
        stack.wait_settled(1800, interval_s=0.2)
        check_invariant(stack, n=n)
        print(f"resume -> every decision done:    {time.monotonic() - t0:.1f} s "
              f"(attempts charged in all: {_charged_total(stack):,})")
    finally:
        for worker in started:
            worker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="decisions")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--fault-after", type=float, default=0.25,
                        help="share of the decisions done when the server turns to 503")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dreads-breaker-") as tmp_dir:
        tmp = Path(tmp_dir)
        redis = RedisServer(tmp / "redis", appendonly=False)
        redis.start()
        url = create_pg_database(args.pg, "breaker")
        sim = Sim(tmp / "sim.log")
        try:
            with Stack.open(url, redis.url, sim.url) as stack:
                measure(stack, sim, tmp, args.n, args.workers, args.fault_after)
        finally:
            sim.stop()
            redis.kill()
            drop_pg_database(url)


if __name__ == "__main__":
    main()
