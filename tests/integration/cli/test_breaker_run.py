"""``dreads run`` and the breaker, with the simulator in real processes: a server that turns
to 503 on every read mid-run pauses the run (exit 1, the reason, fewer than a window of
attempts charged), and once it answers again ``dreads resume`` or the same command completes
it; scattered 500s and rejected decisions never pause a run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.runs_cli import job_line, sqlite_rows, write_jobs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DREADS = str(Path(sys.executable).parent / "dreads")
WINDOW = 50  #: the default breaker window
TRIPPING = "('server_error', 'upstream_unreachable', 'timeout', 'throttled')"


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DREADS_")}
    return {**base, "NO_COLOR": "1", "COLUMNS": "200", "DREADS_MODEL": "dgemma",
            "DREADS_TOKENIZER": "standin", "DREADS_READ_RETRIES": "1",
            "DREADS_BREAKER_PROBE_S": "0", **extra}  # probes off: resumed by hand here


def _count(db: Path, sql: str) -> int:
    return int(sqlite_rows(db, sql)[0][0])


def _wait_done(db: Path, at_least: int, proc: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "dreads run ended before the fault"
        try:
            if _count(db, "SELECT count(*) FROM decisions WHERE status = 'done'") >= at_least:
                return
        except Exception:  # the store is not created yet
            pass
        time.sleep(0.1)
    raise AssertionError(f"fewer than {at_least} decisions done after {timeout_s}s")


def _run_through_outage(make_sim: Callable, tmp_path: Path, *, stem: str, run: str, n: int,
                        done_before: int, down_s: float, timeout_s: float = 120,
                        **env: str) -> tuple[int, str, Path, list[str], Any, float]:
    """``dreads run`` of ``n`` decisions whose simulator turns to 503 for ``down_s`` once
    ``done_before`` are done. Returns its exit code, its stderr on one line, the store, the
    command, the simulator and when it went down."""
    path = write_jobs(tmp_path / f"{stem}.jsonl", [job_line(f"{stem}{i:03d}") for i in range(n)])
    db = tmp_path / f"{stem}.db"
    sim = make_sim(step_ms=40, max_batch=8)  # ~200 reads/s: the fault comes mid-run
    args = [DREADS, "run", str(path), "--upstream", sim.url, "--db", str(db), "--run", run]
    proc = subprocess.Popen(args, cwd=tmp_path, env=_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_done(db, done_before, proc, timeout_s=120)
        httpx.post(f"{sim.url}/sim/down", params={"seconds": down_s}, timeout=5)
        down_at = time.monotonic()
        _, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)
    return proc.returncode, " ".join(err.split()), db, args, sim, down_at


def _paused_run(make_sim: Callable, tmp_path: Path, n: int) -> tuple[Any, Path, list[str]]:
    """``dreads run`` of ``n`` decisions whose simulator turns to 503 mid-run: the run is
    paused by the breaker. Returns the simulator (still down), the store and the command."""
    code, said, db, args, sim, _ = _run_through_outage(
        make_sim, tmp_path, stem="b", run="b", n=n, done_before=60, down_s=3600)
    assert code == 1, said[-2000:]
    assert "error: run b paused: " in said and "attempts failed with server_error" in said
    assert "then `dreads resume b` (running this same command again also resumes it)" in said
    assert sqlite_rows(db, "SELECT status, pause_kind FROM runs") == [("paused", "breaker")]
    charged = _count(db, f"SELECT count(*) FROM attempts WHERE outcome IN {TRIPPING}")
    assert 0 < charged < WINDOW
    assert _count(db, "SELECT count(*) FROM decisions WHERE status IN ('leased', 'failed')") == 0
    url = f"sqlite:///{db}"
    status = subprocess.run([DREADS, "status", "b", "--database-url", url], env=_env(),
                            capture_output=True, text=True, timeout=60)
    assert "run b (paused)" in status.stdout and "paused: " in status.stdout
    return sim, db, args


def _assert_completed_once(db: Path, n: int) -> None:
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("done", n)]
    assert sqlite_rows(db, "SELECT status, pause_reason FROM runs") == [("active", None)]
    assert _count(db, "SELECT count(*) FROM answers") == n
    assert _count(db, "SELECT count(*) FROM attempts WHERE outcome = 'ok' AND won") == n


@pytest.mark.parametrize("go_on", ["resume", "rerun"])
def test_run_pauses_when_every_read_fails_and_goes_on_after(
        make_sim: Callable, tmp_path: Path, go_on: str) -> None:
    n = 600
    sim, db, args = _paused_run(make_sim, tmp_path, n)
    url = f"sqlite:///{db}"
    httpx.post(f"{sim.url}/sim/up", timeout=5)
    again = ([DREADS, "resume", "b", "--database-url", url, "--upstream", sim.url]
             if go_on == "resume" else args)
    done = subprocess.run(again, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "was paused (" in done.stdout + done.stderr
    _assert_completed_once(db, n)


def test_the_api_resumes_a_paused_run(make_sim: Callable, tmp_path: Path,
                                      serve_factory: Callable[..., Any]) -> None:
    n = 300
    sim, db, _ = _paused_run(make_sim, tmp_path, n)
    httpx.post(f"{sim.url}/sim/up", timeout=5)
    server = serve_factory("--database-url", f"sqlite:///{db}", "--upstream", sim.url,
                           env=_env())
    paused = httpx.get(f"{server.url}/v1/runs/b", timeout=30).json()
    assert paused["paused"]["kind"] == "breaker", paused
    resumed = httpx.post(f"{server.url}/v1/runs/b/resume", timeout=120)
    assert resumed.status_code in (200, 202), resumed.text
    deadline = time.monotonic() + 240
    while _count(db, "SELECT count(*) FROM decisions WHERE status = 'done'") < n:
        assert time.monotonic() < deadline, "the resumed run did not finish"
        time.sleep(0.5)
    _assert_completed_once(db, n)


def test_scattered_errors_and_rejected_decisions_never_pause_a_run(
        make_sim: Callable, tmp_path: Path) -> None:
    """5% of first deliveries answered 500 (no read retries, so each is a failed attempt)
    and a run of decisions too long for the canvas (rejected): the run completes."""
    too_long = "word " * 3000
    lines = [job_line(f"x{i:03d}", state=too_long) for i in range(60)]
    lines += [job_line(f"b{i:03d}") for i in range(600)]
    path = write_jobs(tmp_path / "s.jsonl", lines)
    db = tmp_path / "s.db"
    sim = make_sim(fail_rate=0.05)
    done = subprocess.run([DREADS, "run", str(path), "--upstream", sim.url, "--db", str(db),
                           "--run", "s"], cwd=tmp_path, env=_env(DREADS_READ_RETRIES="0"),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sqlite_rows(db, "SELECT status FROM runs") == [("active",)]
    counts = dict(sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status"))
    assert counts == {"done": 600, "rejected": 60}
    assert _count(db, "SELECT count(*) FROM attempts WHERE outcome = 'server_error'") > 10


def test_run_resumes_by_itself_once_its_server_answers_a_probe(
        make_sim: Callable, tmp_path: Path) -> None:
    """A 10 s outage of the simulator mid-run: the run pauses, says so, probes every second,
    resumes by itself when the server is back (no `dreads resume`), and completes, every
    decision answered once."""
    n = 600
    code, said, db, _, _, down_at = _run_through_outage(
        make_sim, tmp_path, stem="h", run="b", n=n, done_before=60, down_s=10, timeout_s=200,
        DREADS_BREAKER_PROBE_S="1")
    assert code == 0, said[-3000:]
    assert "run b paused: server unreachable since " in said, said[-3000:]
    assert "probing every 1 s" in said
    assert "run b resumed at " in said and "(its server answered a probe read)" in said
    assert said.index("paused: server unreachable") < said.index("run b resumed at ")
    assert time.monotonic() - down_at >= 10  # it did wait for the server
    _assert_completed_once(db, n)
    charged = _count(db, f"SELECT count(*) FROM attempts WHERE outcome IN {TRIPPING}")
    assert 0 < charged < WINDOW


def test_a_give_up_time_leaves_the_run_paused(make_sim: Callable, tmp_path: Path) -> None:
    """DREADS_BREAKER_GIVE_UP_S: a server down for longer leaves the run paused (exit 1)."""
    code, said, db, _, _, _ = _run_through_outage(
        make_sim, tmp_path, stem="g", run="g", n=300, done_before=40, down_s=3600,
        DREADS_BREAKER_PROBE_S="1", DREADS_BREAKER_GIVE_UP_S="3")
    assert code == 1, said[-3000:]
    assert "probing every 1 s, for at most 3 s" in said
    assert "no answer from its server within 3 s (DREADS_BREAKER_GIVE_UP_S): it stays " \
           "paused" in said
    assert sqlite_rows(db, "SELECT status, pause_kind FROM runs") == [("paused", "breaker")]
