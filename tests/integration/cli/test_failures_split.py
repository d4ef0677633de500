"""Failures counted where they belong, end to end: one ``dreads run`` interrupted by Ctrl-C,
killed with SIGKILL, and paused by the breaker (the simulator turns to 503), then completed,
with one cell whose reads are really worse (``dreads sim --low-mass-marker`` in its states).

The report flags that cell and only for its reads; the interruption, the lost process and the
pause are the run's infrastructure events, counted once, each "all recovered", never a cell's;
``dreads status`` says the same."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.errors import INFRASTRUCTURE_KINDS
from tests.fixtures.runs_cli import job_line, sqlite_rows, write_jobs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

DREADS = str(Path(sys.executable).parent / "dreads")
N = 300
MARKER = "murky wording"  #: planted in cell c3's states: its reads have low label mass


def _env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DREADS_")}
    return {**base, "NO_COLOR": "1", "COLUMNS": "200", "DREADS_MODEL": "dgemma",
            "DREADS_TOKENIZER": "standin", "DREADS_READ_RETRIES": "1",
            # the pause waits for the hand resume below, as it does with probes off
            "DREADS_BREAKER_PROBE_S": "0"}


def _done(db: Path) -> int:
    try:
        return int(sqlite_rows(db, "SELECT count(*) FROM decisions WHERE status = 'done'")[0][0])
    except Exception:  # the store is not created yet
        return 0


def _run_until(args: list[str], db: Path, at_least: int,
               then: Callable[[subprocess.Popen[str]], None]) -> tuple[int, str]:
    """Start ``dreads run``, wait for ``at_least`` decisions done, ``then(proc)``; its exit
    status and stderr."""
    proc = subprocess.Popen(args, cwd=db.parent, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while _done(db) < at_least:
            assert proc.poll() is None, "dreads run ended before the fault"
            assert time.monotonic() < deadline, f"fewer than {at_least} done after 120 s"
            time.sleep(0.05)
        then(proc)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    return proc.returncode, err


def _json(*args: str) -> Any:
    done = subprocess.run([DREADS, *args, "--json"], env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return orjson.loads(done.stdout)


def test_infrastructure_events_flag_no_cell_and_worse_reads_do(make_sim: Callable,
                                                               tmp_path: Path) -> None:
    lines = [job_line(f"s{i:03d}", cell=f"c{i % 4}", expected="yes" if i % 3 else "no",
                      state=f"Clause {i}" + (f" in {MARKER}" if i % 4 == 3 else "")
                      + ": the parties agree.") for i in range(N)]
    path = write_jobs(tmp_path / "split.jsonl", lines)
    db = tmp_path / "split.db"
    sim = make_sim(step_ms=40, max_batch=8, low_mass_marker=MARKER)  # ~200 reads/s
    args = [DREADS, "run", str(path), "--upstream", sim.url, "--db", str(db), "--run", "split"]

    # Ctrl-C: exit 130, the leases held come back as ``cancelled`` attempts
    code, err = _run_until(args, db, 30, lambda p: p.send_signal(signal.SIGINT))
    assert code == 130, err[-2000:]
    # SIGKILL of the process reading: its leases stay; the next run takes them (worker_lost)
    code, _ = _run_until(args, db, _done(db) + 30, lambda p: os.killpg(p.pid, signal.SIGKILL))
    assert code == -signal.SIGKILL
    assert int(sqlite_rows(db, "SELECT count(*) FROM decisions WHERE status = 'leased'")[0][0])
    # the server turns to 503: the breaker pauses the run (exit 1)
    code, err = _run_until(args, db, _done(db) + 30, lambda p: httpx.post(
        f"{sim.url}/sim/down", params={"seconds": 3600}, timeout=5))
    assert code == 1 and "paused" in err, err[-2000:]
    httpx.post(f"{sim.url}/sim/down", params={"seconds": 0}, timeout=5)
    finished = subprocess.run(args, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                              timeout=180)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "infrastructure (not counted against any cell):" in finished.stdout  # its summary
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("done", N)]

    url = f"sqlite:///{db}"
    report = _json("report", "split", "--database-url", url)
    diag = report["diagnostics"]
    # the cell whose reads are worse is flagged, for its reads; no cell for the infrastructure
    flagged = {(f["cell"], f["flag"]) for f in diag["flagged"]}
    assert ("c3", "low_label_mass") in flagged, diag["flagged"]
    assert {cell for cell, _ in flagged} == {"c3"}
    assert all(flag != "read_failures" for _, flag in flagged)
    for cell in diag["cells"].values():
        assert not set(cell["failures"]) & INFRASTRUCTURE_KINDS, cell["failures"]
    # the infrastructure's events, on their own: each kind recovered, one pause resumed
    infra = report["infrastructure"]
    kinds = {k["kind"]: k for k in infra["kinds"]}
    assert {"cancelled", "worker_lost"} <= set(kinds), kinds
    assert set(kinds) & {"server_error", "paused"}, kinds
    assert all(k["recovered"] == k["decisions"] > 0 for k in kinds.values()), kinds
    assert [(p["kind"], p["resumed_at"] is not None) for p in infra["pauses"]] == [
        ("breaker", True)]
    said = "\n".join(infra["lines"])
    assert "interrupted (Ctrl-C" in said and "lost with their worker" in said
    assert "1 pause by the breaker (" in said
    assert "attempts failed with server_error), resumed" in said
    assert "all recovered" in said
    # status says the same, from the same computation
    shown = subprocess.run([DREADS, "status", "split", "--database-url", url], env=_env(),
                           capture_output=True, text=True, timeout=60).stdout
    assert "infrastructure (not counted against any cell):" in shown
    assert all(" ".join(line.split()) in " ".join(shown.split()) for line in infra["lines"])
