"""PostgreSQL storage per completed one-question decision, by table and index.

    python bench/storage.py                  # 20,000 decisions (a minute or two on 2 cores)
    python bench/storage.py -n 100000 --vacuum

Submits ``-n`` one-question yes/no decisions into a new database on the PostgreSQL at ``--pg``
with ``dreads submit``'s code, answers them in this process through the same lease / claim /
commit code the workers run (``app.runs.embedded.execute_run``: chunks of claimed decisions against
the simulator, one transaction per finished decision), then prints
``pg_total_relation_size`` of every table (heap + indexes + TOAST) and of every index, divided
by the number of decisions. With ``--vacuum`` it also prints the figures after a plain
``VACUUM`` (which makes dead row versions reusable but does not give space back).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.engine import ReadSettings  # noqa: E402
from app.runs.embedded import EmbeddedConfig, execute_run  # noqa: E402
from app.runs.submit import SubmitRequest, submit_job  # noqa: E402
from app.sim.options import SimOptions  # noqa: E402
from app.sim.server import start_sim_thread  # noqa: E402
from app.store.db import make_engine, make_sessionmaker  # noqa: E402
from app.tokenizer.hf import load_tokenizer  # noqa: E402
from tests.fixtures.job_rows import job_lines  # noqa: E402
from tests.fixtures.services import create_pg_database, drop_pg_database  # noqa: E402

TABLES = ("decisions", "decision_payloads", "attempts", "draws", "answers")


def _sizes(engine: object) -> tuple[dict[str, int], dict[str, int]]:
    with engine.connect() as conn:  # type: ignore[attr-defined]
        tables = {t: int(conn.execute(text("SELECT pg_total_relation_size(:t)"), {"t": t})
                         .scalar_one()) for t in TABLES}
        rows = conn.execute(text(
            "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes "
            "WHERE relname = ANY(:t) ORDER BY relname, indexrelname"), {"t": list(TABLES)})
        indexes = {str(name): int(size) for name, size in rows}
    return tables, indexes


def _print(title: str, tables: dict[str, int], indexes: dict[str, int], n: int) -> None:
    total = sum(tables.values())
    print(f"\n{title}: {total / n:,.0f} bytes per decision ({total / 2**20:,.1f} MiB for {n:,})")
    for name, size in tables.items():
        print(f"  table {name:<28} {size / n:8,.0f} B")
    for name, size in indexes.items():
        print(f"    index {name:<26} {size / n:8,.0f} B")


def _stats(engine: object) -> str:
    with engine.connect() as conn:  # type: ignore[attr-defined]
        draws = conn.execute(text("SELECT count(*) FROM draws")).scalar_one()
        done = conn.execute(text("SELECT count(*) FROM decisions WHERE status = 'done'")
                            ).scalar_one()
    return f"{done:,} done, {draws / max(done, 1):.2f} draws per decision"


def run(pg: str, n: int, vacuum: bool) -> None:
    url = create_pg_database(pg, "storage")
    engine = make_engine(url)
    sim = start_sim_thread(SimOptions())
    try:
        factory = make_sessionmaker(engine)
        settings = ReadSettings()
        request = SubmitRequest(path=Path("job.jsonl"), run_name="storage", settings=settings,
                                upstream=sim.url)
        t0 = time.perf_counter()
        report = _submit(request, factory, n)
        t1 = time.perf_counter()
        stats = asyncio.run(execute_run(
            factory, report.run, upstream_url=sim.url, tokenizer=load_tokenizer("standin"),
            config=EmbeddedConfig(chunk_size=64, workers=4, max_in_flight=128)))
        t2 = time.perf_counter()
        print(f"submitted {n:,} in {t1 - t0:.1f} s, answered in {t2 - t1:.1f} s "
              f"({stats.chunks} chunks); {_stats(engine)}")
        _print("after the run", *_sizes(engine), n)
        if vacuum:
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                for table in TABLES:
                    conn.execute(text(f"VACUUM {table}"))
            _print("after VACUUM", *_sizes(engine), n)
    finally:
        sim.stop()
        engine.dispose()
        drop_pg_database(url)


class _Dropped:
    """A publisher that drops the messages (the in-process executor claims by id): the rows
    are written exactly as ``dreads submit`` writes them (queued, once)."""

    def start(self, now_s: float) -> None:
        del now_s

    def __call__(self, run_id: int, decision_ids: object) -> int:
        return 0


def _submit(request: SubmitRequest, factory: object, n: int) -> object:
    return submit_job(request, factory, load_tokenizer("standin"),  # type: ignore[arg-type]
                      lines=job_lines(n), publisher=_Dropped())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="decisions")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--vacuum", action="store_true", help="also measure after VACUUM")
    args = parser.parse_args()
    run(args.pg, args.n, args.vacuum)


if __name__ == "__main__":
    main()
