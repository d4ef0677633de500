"""``dreads run``: the embedded mode on SQLite with the simulator, its summary, and a run
killed half-way (SIGKILL) then run again: every decision answered exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tests.fixtures.runs_cli import CliResult, job_line, sqlite_rows, write_jobs

Dreads = Callable[..., CliResult]
ROOT = Path(__file__).resolve().parents[3]
DREADS = str(Path(sys.executable).parent / "dreads")
BY_STATUS = "SELECT status, count(*) FROM decisions GROUP BY status"


def test_run_small_example_with_sim(dreads: Dreads, tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    result = dreads("run", str(ROOT / "examples" / "small.jsonl"), "--upstream", "sim",
                    "--db", str(db))
    assert result.code == 0, result.stderr
    assert "SIMULATOR" in result.stderr and "small.key.jsonl" in result.stderr
    assert "done 5" in result.stdout and "headline figures" in result.stdout
    assert "AUC" in result.stdout and "recall >0.30" in result.stdout
    assert sqlite_rows(db, BY_STATUS) == [("done", 5)]
    again = dreads("run", str(ROOT / "examples" / "small.jsonl"), "--upstream", "sim",
                   "--db", str(db), "--json")
    assert again.code == 0, again.stderr
    doc = again.json()
    assert doc["counts"] == {"done": 5} and doc["draws"]["draw_rows"] > 0
    assert doc["headline"]["noul"]["n"] == 3
    assert sqlite_rows(db, "SELECT count(*) FROM attempts") == [(5,)]  # nothing ran twice


def test_summary_counts_reads_as_requests_and_draws_apart(dreads: Dreads,
                                                         tmp_path: Path) -> None:
    """A joint read draws each question of its canvas: three draws per read here. The summary's
    reads are the requests the spend counts; its draws are the draw rows."""
    questions = {q: {"type": "noul", "instructions": f"Is it {q}?"} for q in ("a", "b", "c")}
    lines = [orjson.dumps({"id": f"j{i}", "cell": "c", "state": f"Clause {i}: text.",
                           "questions": questions}).decode() for i in range(4)]
    path = write_jobs(tmp_path / "joint.jsonl", lines)
    db = tmp_path / "d.db"
    result = dreads("run", str(path), "--upstream", "sim", "--mode", "joint", "--db", str(db))
    assert result.code == 0, result.stderr
    reads = dreads("status", "joint", "--db", str(db), "--json").json()["spend"]["reads"]
    draws = _count(db, "1 = 1", table="draws")
    assert draws == 3 * reads > 0
    said = " ".join(result.stdout.split())
    assert f"reads: {reads} (requests to the model server); draws: {draws} " in said, said


def test_run_refuses_changed_settings(dreads: Dreads, tmp_path: Path) -> None:
    path = write_jobs(tmp_path / "j.jsonl", [job_line("a")])
    db = tmp_path / "d.db"
    assert dreads("run", str(path), "--upstream", "sim", "--db", str(db)).code == 0
    result = dreads("run", str(path), "--upstream", "sim", "--db", str(db), "--seed", "9")
    assert result.code == 2 and "(--seed 0 -> 9)" in result.stderr


def _wait_done(db: Path, at_least: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "dreads run ended before it could be killed"
        if db.exists():
            try:
                done = sqlite_rows(db, "SELECT count(*) FROM decisions WHERE status = 'done'")
            except Exception:  # schema not created yet
                done = [(0,)]
            if done[0][0] >= at_least:
                return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {at_least} decisions done after {timeout_s}s")


def _count(db: Path, where: str, table: str = "decisions") -> int:
    return sqlite_rows(db, f"SELECT count(*) FROM {table} WHERE {where}")[0][0]


@pytest.mark.slow
def test_interrupted_and_killed_run_continues_exactly_once(make_sim: Callable,
                                                          tmp_path: Path) -> None:
    n = 200
    path = write_jobs(tmp_path / "kill.jsonl", [job_line(f"k{i:03d}") for i in range(n)])
    db = tmp_path / "kill.db"
    slow = make_sim(step_ms=40, max_batch=4)  # ~100 reads/s: the run takes several seconds
    args = [DREADS, "run", str(path), "--upstream", slow.url, "--db", str(db),
            "--workers", "4", "--chunk-size", "8"]
    # Ctrl-C: exit 130, this process's leases released as ``cancelled`` attempts
    proc = subprocess.Popen(args, cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_done(db, 10, proc, timeout_s=180)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode == 130 and "interrupted" in err
    assert _count(db, "status = 'leased'") == 0
    assert _count(db, "outcome = 'cancelled'", "attempts") > 0
    # SIGKILL: leases stay behind; the next run reclaims them (``worker_lost``)
    proc = subprocess.Popen(args, cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_done(db, _count(db, "status = 'done'") + 20, proc, timeout_s=180)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    held = _count(db, "status = 'leased'")
    assert held > 0 and _count(db, "status = 'done'") < n
    rerun = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "back to pending" in rerun.stderr
    assert sqlite_rows(db, BY_STATUS) == [("done", n)]
    per_decision = sqlite_rows(db, "SELECT d.id, count(a.id) FROM decisions d LEFT JOIN "
                               "answers a ON a.decision_id = d.id GROUP BY d.id")
    assert len(per_decision) == n and {c for _, c in per_decision} == {1}
    assert _count(db, "outcome = 'worker_lost'", "attempts") == held
    assert _count(db, "outcome = 'ok' AND won", "attempts") == n


def test_resume_on_sqlite_runs_here(dreads: Dreads, tmp_path: Path) -> None:
    path = write_jobs(tmp_path / "j.jsonl", [job_line(f"e{i}") for i in range(4)])
    db = tmp_path / "e.db"
    url = f"sqlite:///{db}"
    assert dreads("db", "upgrade", "--database-url", url).code == 0
    submitted = dreads("submit", str(path), "--run", "emb", "--database-url", url,
                       "--broker", "redis://127.0.0.1:1/0", "--upstream", "sim")
    assert submitted.code == 0, submitted.stderr
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("pending", 4)]
    resumed = dreads("resume", "emb", "--database-url", url)
    assert resumed.code == 0, resumed.stderr
    assert "SIMULATOR" in resumed.stderr and "done 4" in resumed.stdout
    watch = dreads("status", "emb", "--watch", "--interval", "0.2", "--database-url", url)
    assert watch.code == 0 and "done 4" in watch.stdout


def test_replicates_draw_different_noise(dreads: Dreads, tmp_path: Path) -> None:
    path = write_jobs(tmp_path / "j.jsonl", [job_line("r1"), job_line("r2", expected="no")])
    db = tmp_path / "r.db"
    result = dreads("run", str(path), "--upstream", "sim", "--db", str(db), "--replicates", "3",
                    "--policy", "fixed", "--draws", "1", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["counts"] == {"done": 6}
    listed = dreads("runs", "--json", "--database-url", f"sqlite:///{db}").json()
    assert [(r["name"], r["replicates"], r["settings"]["policy"]) for r in listed] == [
        ("j", 3, "fixed")]
    rows = sqlite_rows(db, "SELECT d.key, d.replicate, a.p_yes FROM decisions d JOIN answers a "
                      "ON a.decision_id = d.id ORDER BY 1, 2")
    assert [(k, r) for k, r, _ in rows] == [(k, r) for k in ("r1", "r2") for r in range(3)]
    for key in ("r1", "r2"):
        assert len({p for k, _, p in rows if k == key}) == 3  # each replicate its own noise
