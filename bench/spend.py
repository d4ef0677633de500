"""Spend and budgets under load: how far a run passes its budget, and what the accounting
costs per decision.

    python bench/spend.py                    # 20,000 decisions, 2 workers (a few minutes)
    python bench/spend.py -n 5000 --budget 2

Submits ``-n`` one-question decisions (four cells) into a new database on the PostgreSQL at
``--pg`` and a private Redis, records a token price and a budget with the run (what
``submit --price-input USD --max-cost USD`` records), and starts ``--workers``
``dreads worker`` processes (one pool process each, every other setting at its default)
against ``dreads sim``. The price makes one read of these decisions cost about a tenth of a
cent, so the budget is reached part way. It prints:

- the overshoot: what the run had spent once the decisions in flight at the pause finished,
  past its budget, in dollars and in decisions recorded after the pause, beside what was in
  flight at most (each worker process's chunk and the next it starts at the hand-off);
- the accounting's cost per decision: the commits of finished decisions (their attempts share
  a worker and an end time) and the spend rows they wrote (``pg_stat_user_tables``), the
  client CPU and wall time of one commit's accounting (the statement adding each cell's spend,
  and the read of the run's cost for its budget; 2,000 commits of as many cells as the run's
  averaged, the commit itself not counted: the finished decisions' transaction commits
  anyway) over the decisions per commit, plus the claim's read of the run's prices over a
  chunk, and the bytes of ``run_spend`` (with its dead row versions, before any vacuum) per
  decision;
- after ``dreads resume --max-cost`` with a budget past the whole run, the seconds to finish
  it, every decision answered once.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.engine import ReadSettings, parse_decision, plan_decision  # noqa: E402
from app.engine.pricing import SpendDelta  # noqa: E402
from app.store.db import session_scope  # noqa: E402
from app.store.models import Attempt, Run, RunSpend  # noqa: E402
from app.store.spend import add_spend, run_prices, set_prices, spent_cost  # noqa: E402
from app.tokenizer.hf import load_tokenizer  # noqa: E402
from tests.fixtures.job_rows import job_lines  # noqa: E402
from tests.fixtures.services import (  # noqa: E402
    VENV_BIN,
    RedisServer,
    WorkerProcess,
    create_pg_database,
    drop_pg_database,
    wait_until,
)
from tests.integration.durability.harness import Sim, Stack, check_invariant  # noqa: E402

CHUNK = 64
#: Dollars one read's prompt costs at the price the bench records.
READ_COST = 0.001


def _worker_env(stack: Stack) -> dict[str, str]:
    """Every setting at its default but where the run's services are."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREADS_")}
    return {**env, "DREADS_DATABASE_URL": stack.database_url,
            "DREADS_BROKER_URL": stack.broker_url, "DREADS_UPSTREAM": stack.upstream,
            "PYTHONUNBUFFERED": "1"}


def _prompt_tokens() -> int:
    """Prompt tokens of one read of the bench's decisions (the simulator's tokenizer)."""
    import orjson

    _, line = job_lines(1)[0]
    plan = plan_decision(parse_decision(orjson.loads(line), line_no=1), ReadSettings(),
                         load_tokenizer("standin"))
    return len(plan.units[0].prompt_ids)


def _run_row(stack: Stack) -> tuple[str, object]:
    with session_scope(stack.factory) as s:
        status, paused_at = s.execute(select(Run.status, Run.paused_at)
                                      .where(Run.id == stack.run_id)).one()
    return str(status), paused_at


def _spent(stack: Stack) -> tuple[float, int]:
    with session_scope(stack.factory) as s:
        cost, decisions = s.execute(select(func.sum(RunSpend.cost), func.sum(RunSpend.decisions))
                                    .where(RunSpend.run_id == stack.run_id)).one()
    return float(cost or 0.0), int(decisions or 0)


def _after_pause(stack: Stack, paused_at: object) -> int:
    with session_scope(stack.factory) as s:
        return int(s.scalar(select(func.count()).where(
            Attempt.run_id == stack.run_id, Attempt.outcome == "ok",
            Attempt.ended_at > paused_at)) or 0)


def _commits(stack: Stack) -> int:
    """Commits of finished decisions: the ok attempts of one share a worker and an end."""
    with session_scope(stack.factory) as s:
        groups = (select(Attempt.worker, Attempt.ended_at)
                  .where(Attempt.run_id == stack.run_id, Attempt.outcome == "ok")
                  .group_by(Attempt.worker, Attempt.ended_at).subquery())
        return int(s.scalar(select(func.count()).select_from(groups)) or 0)


def _upserts_and_bytes(stack: Stack) -> tuple[int, int]:
    """(spend row writes, bytes of run_spend with its indexes and dead row versions)."""
    with session_scope(stack.factory) as s:
        s.execute(text("SELECT pg_stat_force_next_flush()"))
    time.sleep(1.0)
    with session_scope(stack.factory) as s:
        writes = s.execute(text("SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables "
                                "WHERE relname = 'run_spend'")).scalar_one()
        size = s.execute(text("SELECT pg_total_relation_size('run_spend')")).scalar_one()
    return int(writes), int(size)


def _timed(stack: Stack, rounds: int, work: Callable[[Session], object]) -> tuple[float, float]:
    """(client CPU ms, wall ms) of ``work`` in a transaction of its own, its start and its
    commit left out."""
    cpu = wall = 0.0
    for _ in range(rounds):
        with session_scope(stack.factory) as s:
            s.execute(text("SELECT 1"))  # the transaction begun, as the commit's is by then
            cpu0, wall0 = time.process_time(), time.perf_counter()
            work(s)
            cpu += time.process_time() - cpu0
            wall += time.perf_counter() - wall0
    return cpu / rounds * 1000.0, wall / rounds * 1000.0


def _accounting_cost(stack: Stack, cells: int, rounds: int = 2000
                     ) -> tuple[tuple[float, float], tuple[float, float]]:
    """(CPU ms, wall ms) of one commit's accounting with ``cells`` cells (the spend added, the
    run's cost read for its budget), and of the claim's read of the run's prices."""
    delta = SpendDelta(decisions=1, reads=2, input_tokens=200, output_tokens=2,
                       gpu_seconds=0.01, cost=0.002)
    by_cell = {f"bench{i}": delta for i in range(cells)}

    def commit(s: Session) -> None:
        add_spend(s, stack.run_id, by_cell)
        spent_cost(s, stack.run_id)

    _timed(stack, 20, commit)  # warm the statement cache
    return (_timed(stack, rounds, commit),
            _timed(stack, rounds, lambda s: run_prices(s, stack.run_id)))


def measure(stack: Stack, tmp: Path, n: int, workers: int, budget: float) -> None:
    stack.submit(n, name="spend", chunk_size=CHUNK)
    price = READ_COST / _prompt_tokens() * 1_000_000
    with session_scope(stack.factory) as s:
        set_prices(s, stack.run_id, {"price_input_per_mtok": price, "max_cost": budget})
    started = [WorkerProcess([str(VENV_BIN / "dreads"), "worker", "-c", "1", "-n",
                              f"spend{i}-{time.monotonic_ns()}@%h", "--loglevel", "WARNING"],
                             _worker_env(stack), tmp / f"worker{i}.log") for i in range(workers)]
    try:
        t0 = time.monotonic()
        wait_until(lambda: _run_row(stack)[0] == "paused", timeout_s=1800, interval_s=0.05,
                   what="the run to pause")
        to_pause = time.monotonic() - t0
        time.sleep(20)  # the decisions in flight finish
        _, paused_at = _run_row(stack)
        spent, recorded = _spent(stack)
        after = _after_pause(stack, paused_at)
        in_flight = workers * 2 * CHUNK
        print(f"decisions: {n:,}, workers: {workers}, price ${price:.2f} per million input "
              f"tokens (${READ_COST} a read), budget ${budget:.2f}")
        print(f"paused after {to_pause:.1f} s, {recorded - after:,} decisions recorded")
        print(f"spent once in-flight work ended: ${spent:.4f}: overshoot ${spent - budget:.4f} "
              f"({(spent - budget) / budget:.1%} of the budget)")
        print(f"decisions recorded after the pause: {after:,} (in flight at most: {in_flight})")
        t1 = time.monotonic()
        resumed = subprocess.run([str(VENV_BIN / "dreads"), "resume", "spend", "--max-cost",
                                  str(budget * 1000)], env=_worker_env(stack),
                                 capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 0, resumed.stderr
        stack.wait_settled(1800, interval_s=0.2)
        check_invariant(stack, n=n)
        print(f"resume --max-cost -> every decision done: {time.monotonic() - t1:.1f} s")
        total, decisions = _spent(stack)
        writes, size = _upserts_and_bytes(stack)
        commits = _commits(stack)
        cells = max(1, round(writes / commits))
        (cpu_ms, wall_ms), (claim_cpu, claim_wall) = _accounting_cost(stack, cells)
        per_commit = decisions / commits
        print(f"commits: {commits:,} for {decisions:,} decisions ({per_commit:.1f} a commit); "
              f"spend rows written: {writes:,} ({writes / commits:.1f} a commit); "
              f"run cost ${total:.4f}")
        print(f"accounting per commit ({cells} cell(s)): {cpu_ms:.3f} ms CPU, {wall_ms:.3f} ms "
              f"wall; the claim's price read: {claim_cpu:.3f} ms CPU, {claim_wall:.3f} ms wall")
        cpu_per = cpu_ms / per_commit + claim_cpu / CHUNK
        wall_per = wall_ms / per_commit + claim_wall / CHUNK
        print(f"accounting per decision: {cpu_per:.4f} ms CPU, {wall_per:.4f} ms wall")
        print(f"run_spend on disk: {size:,} bytes = {size / decisions:.1f} bytes per decision")
    finally:
        for worker in started:
            worker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="decisions")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget", type=float, default=10.0, help="the run's --max-cost")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dreads-spend-") as tmp_dir:
        tmp = Path(tmp_dir)
        redis = RedisServer(tmp / "redis", appendonly=False)
        redis.start()
        url = create_pg_database(args.pg, "spend")
        sim = Sim(tmp / "sim.log")
        try:
            with Stack.open(url, redis.url, sim.url) as stack:
                measure(stack, tmp, args.n, args.workers, args.budget)
        finally:
            sim.stop()
            redis.kill()
            drop_pg_database(url)


if __name__ == "__main__":
    main()
