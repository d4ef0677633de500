"""A million decisions: submit, broker loss, resume and cancel at scale (PostgreSQL + Redis).

    python bench/scale.py                    # 1,000,000 decisions (several minutes on 2 cores)
    python bench/scale.py -n 100000

On a new database on the PostgreSQL at ``--pg`` and a private ``redis-server`` (no
persistence), with no worker running, prints:

1. ``dreads submit`` of ``-n`` one-question decisions: wall time and the peak RSS of the
   ``dreads`` process (``ru_maxrss`` of the child);
2. the broker losing its data (``FLUSHDB``): the time one sweep takes to re-publish every
   queued decision (``app.runs.sweep.sweep_once``, what each worker's sweeper thread runs), and
   how many decisions the messages in Redis then name;
3. ``dreads resume`` once every decision is done (nothing to do): wall time of the command;
4. ``dreads cancel`` of a run of ``-n`` queued decisions: wall time of the command.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.broker.client import make_client  # noqa: E402
from app.broker.names import queue_for  # noqa: E402
from app.config import get_settings  # noqa: E402
from app.runs.sweep import SweepPolicy, sweep_once  # noqa: E402
from app.store.db import make_engine, make_sessionmaker  # noqa: E402
from tests.fixtures.job_rows import job_lines  # noqa: E402
from tests.fixtures.services import (  # noqa: E402
    VENV_BIN,
    RedisServer,
    create_pg_database,
    drop_pg_database,
)


def dreads(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one ``dreads`` command: the high-water mark
    (``VmHWM``) of the command's process and of each of its children (the publishing child),
    the largest of them, sampled while it runs. (``ru_maxrss`` from ``wait4`` would count this
    script's own memory too: a forked child starts with its parent's pages.)"""
    import psutil

    t0 = time.perf_counter()
    peaks: dict[int, int] = {}
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([str(VENV_BIN / "dreads"), *args], env=env, cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT)
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            for p in (root, *_children(root)):
                peaks[p.pid] = max(peaks.get(p.pid, 0), _hwm_kib(p.pid))
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            out.seek(0)
            raise RuntimeError(f"dreads {args[0]} failed: {out.read()[-4000:].decode()}")
    return wall, max(peaks.values(), default=0) / 1024


def _children(proc: object) -> list[object]:
    import psutil

    try:
        return list(proc.children(recursive=True))  # type: ignore[attr-defined]
    except psutil.Error:
        return []


def _hwm_kib(pid: int) -> int:
    """The process's peak resident set so far (``VmHWM``, KiB); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def write_job(path: Path, n: int, prefix: str) -> None:
    with path.open("w") as out:
        for _, line in job_lines(n, prefix=prefix):
            out.write(line + "\n")


def queued_in_redis(redis: RedisServer, queue: str) -> int:
    import base64

    import orjson

    total = 0
    for raw in redis.client().lrange(queue, 0, -1):
        body = orjson.loads(base64.b64decode(orjson.loads(raw)["body"]))
        total += len(body[0][1])
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=1_000_000)
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    n = args.n
    with tempfile.TemporaryDirectory(prefix="dreads-scale-") as tmp_name:
        tmp = Path(tmp_name)
        redis = RedisServer(tmp / "redis", appendonly=False)
        redis.start()
        url = create_pg_database(args.pg, "scale")
        env = {**os.environ, "DREADS_DATABASE_URL": url, "DREADS_BROKER_URL": redis.url,
               "DREADS_MODEL": "dgemma", "DREADS_TOKENIZER": "standin",
               "DREADS_UPSTREAM": "http://127.0.0.1:9"}
        engine = make_engine(url)
        try:
            run(tmp, n, env, redis, engine)
        finally:
            engine.dispose()
            redis.kill()
            drop_pg_database(url)


def run(tmp: Path, n: int, env: dict[str, str], redis: RedisServer, engine: object) -> None:
    job = tmp / "job.jsonl"
    write_job(job, n, "d")
    size_mb = job.stat().st_size / 2**20
    wall, rss = dreads(["submit", str(job), "--run", "big", "--json"], env)
    print(f"submit {n:,} decisions ({size_mb:,.0f} MiB file): {wall:.1f} s, "
          f"{n / wall:,.0f} decisions/s, peak RSS {rss:,.0f} MiB")
    queue = queue_for("dgemma", 320)
    print(f"  messages in Redis name {queued_in_redis(redis, queue):,} decisions")

    redis.wipe()
    celery = make_client(get_settings(), broker_url=redis.url)
    factory = make_sessionmaker(engine)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    report = sweep_once(factory, celery, SweepPolicy(chunk_size=64, requeue_after_s=600))
    print(f"FLUSHDB, then one sweep: {time.perf_counter() - t0:.1f} s, re-published "
          f"{report.published:,} decisions in {report.messages:,} messages "
          f"(broker_lost={report.broker_lost}); Redis now names "
          f"{queued_in_redis(redis, queue):,}")
    celery.close()

    with engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(text("UPDATE decisions SET status = 'done', finished_at = now()"))
    # a run finishes over hours, with autovacuum passing; one mass UPDATE needs it by hand
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:  # type: ignore[attr-defined]
        conn.execute(text("VACUUM ANALYZE decisions"))
    wall, _ = dreads(["resume", "big", "--json"], env)
    print(f"resume with nothing to do ({n:,} done): {wall:.2f} s (whole command)")

    write_job(job, n, "c")
    dreads(["submit", str(job), "--run", "cancelme", "--json"], env)
    wall, _ = dreads(["cancel", "cancelme"], env)
    print(f"cancel {n:,} queued decisions: {wall:.2f} s (whole command)")


if __name__ == "__main__":
    main()
