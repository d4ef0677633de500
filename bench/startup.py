"""Start-up time of every ``dreads`` command: wall seconds from exec to exit, median of N.

    python bench/startup.py                 # each command 5 times, a table
    python bench/startup.py --repeat 9 --json
    python bench/startup.py --only "dreads --help" --only "dreads runs"

A command line tool of this kind starts well under half a second; the heavy parts (torch,
transformers, scikit-learn, scipy, matplotlib, Celery, FastAPI, the API) are imported only by
the commands that use them. The script first makes a small SQLite store with one finished run
(``dreads run examples/small.jsonl --upstream sim``, not timed), then times each command line
against it in a fresh process. ``--database-url`` times the store commands against another
database (e.g. PostgreSQL) that already holds the run named by ``--run``.

The commands run as a user's install runs them: Python caches the bytecode of dreads' modules
(``PYTHONDONTWRITEBYTECODE`` is cleared for them; ``--no-bytecode-cache`` keeps it, so that
every run compiles dreads' own modules again).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
DREADS = Path(sys.executable).with_name("dreads")
RUN = "small"

#: (label, argv after ``dreads``): the three with a target first, then every command's help
#: and the store commands a user runs while a run goes on.
COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dreads --help", ("--help",)),
    ("dreads status RUN", ("status", "{run}")),
    ("dreads runs", ("runs",)),
    ("dreads status RUN --json", ("status", "{run}", "--json")),
    ("dreads export RUN", ("export", "{run}")),
    ("dreads db current", ("db", "current")),
    ("dreads report RUN", ("report", "{run}")),
    ("dreads run --help", ("run", "--help")),
    ("dreads submit --help", ("submit", "--help")),
    ("dreads resume --help", ("resume", "--help")),
    ("dreads report --help", ("report", "--help")),
    ("dreads serve --help", ("serve", "--help")),
    ("dreads worker --help", ("worker", "--help")),
    ("dreads sim --help", ("sim", "--help")),
    ("dreads check-upstream --help", ("check-upstream", "--help")),
    ("dreads status nope (error)", ("status", "nope")),
)


def _prepare(workdir: Path) -> str:
    """A SQLite store holding the finished run ``small``; returns its URL."""
    db = workdir / "bench.db"
    subprocess.run([str(DREADS), "run", str(ROOT / "examples" / "small.jsonl"), "--upstream",
                    "sim", "--db", str(db), "--run", RUN, "--json"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir)
    return f"sqlite:///{db}"


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time_once(argv: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run: CPU (user + system) varies less with the machine's load."""
    cpu, started = _cpu_s(), time.perf_counter()
    subprocess.run([str(DREADS), *argv], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started, _cpu_s() - cpu


def measure(argv: Sequence[str], env: dict[str, str], cwd: Path,
            repeat: int) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of ``repeat`` runs of ``dreads argv`` (one untimed warm-up first)."""
    _time_once(argv, env, cwd)
    return [_time_once(argv, env, cwd) for _ in range(repeat)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="Timed runs per command (5).")
    parser.add_argument("--database-url", help="Time against this store (holding --run).")
    parser.add_argument("--run", default=RUN, help="Run name in --database-url.")
    parser.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
    parser.add_argument("--only", action="append", metavar="LABEL",
                        help="Time only this command (its label in the table); repeatable.")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="Keep PYTHONDONTWRITEBYTECODE from the environment.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dreads-startup-") as tmp:
        workdir = Path(tmp)
        url = args.database_url or _prepare(workdir)
        env = {**os.environ, "DREADS_DATABASE_URL": url, "NO_COLOR": "1", "COLUMNS": "120"}
        if not args.no_bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        rows = []
        for label, template in COMMANDS:
            if args.only and label not in args.only:
                continue
            argv = [part.format(run=args.run) for part in template]
            runs = measure(argv, env, workdir, args.repeat)
            walls = [wall for wall, _ in runs]
            rows.append({"command": label, "median_s": statistics.median(walls),
                         "min_s": min(walls), "max_s": max(walls),
                         "cpu_median_s": statistics.median(cpu for _, cpu in runs)})
    if args.json:
        print(orjson.dumps({"repeat": args.repeat, "rows": rows}).decode())
        return
    print(f"start-up, wall seconds, median of {args.repeat} (load average "
          f"{os.getloadavg()[0]:.1f}; CPU: user + system of the process)")
    print(f"| {'command':<30} | median s | min s | max s | CPU s (median) |")
    print(f"| {'-' * 30} | -------- | ----- | ----- | -------------- |")
    for r in rows:
        print(f"| {r['command']:<30} | {r['median_s']:8.2f} | {r['min_s']:5.2f} | "
              f"{r['max_s']:5.2f} | {r['cpu_median_s']:14.2f} |")


if __name__ == "__main__":
    main()
