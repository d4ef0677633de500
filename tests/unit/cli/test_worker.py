"""``dreads worker`` supervises its Celery worker: restarts it, with a capped backoff, for as
long as it keeps dying on its own (forever unless a give-up time is set), says each change of
state, and ends with it after a stop signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli.supervisor import Backoff
from app.cli.worker import supervise
from app.telemetry.supervisor import SupervisorState


def _child(tmp_path: Path, code: int, *, die_first: int | None = None) -> list[str]:
    """A child that records its start and exits with ``code`` (with ``die_first``: only
    its first ``die_first`` starts fail; the next one exits 0, as a stop would)."""
    log = tmp_path / "starts"
    exit_code = (f"({code} if len(open({str(log)!r}).read()) <= {die_first} else 0)"
                 if die_first is not None else str(code))
    return [sys.executable, "-c",
            f"open({str(log)!r}, 'a').write('x'); raise SystemExit({exit_code})"]


def test_the_backoff_doubles_up_to_its_cap() -> None:
    backoff = Backoff(first_s=1, max_s=60)
    assert [backoff.delay(n) for n in (1, 2, 3, 6, 7, 8, 500)] == [1, 2, 4, 32, 60, 60, 60]


def test_a_worker_that_keeps_dying_is_started_again_not_given_up(tmp_path: Path) -> None:
    """Twenty deaths in a row (the old supervisor gave up after 11): it keeps restarting,
    each restart said and counted, until the child finally runs."""
    lines: list[str] = []
    state = SupervisorState()
    code = supervise(_child(tmp_path, 3, die_first=20), say=lines.append, state=state,
                     backoff=Backoff(first_s=0.001, max_s=0.004, healthy_s=30))
    assert code == 0
    assert (tmp_path / "starts").read_text() == "x" * 21
    assert state.snapshot() == ("stopped", 20, 0.0)
    waits = [line for line in lines if "starting it again in" in line]
    assert len(waits) == 20
    assert "exited with 3 (1 time(s) in a row); starting it again in 0.001 s" in waits[0]
    assert "in 0.004 s" in waits[-1]  # capped
    assert sum("runs again" in line for line in lines) == 20


def test_a_give_up_time_ends_the_supervisor(tmp_path: Path) -> None:
    lines: list[str] = []
    state = SupervisorState()
    code = supervise(_child(tmp_path, 3), say=lines.append, state=state,
                     backoff=Backoff(first_s=0.05, max_s=0.1, give_up_s=0.5))
    assert code == 3
    assert state.snapshot()[0] == "gave_up"
    assert "giving up (DREADS_WORKER_GIVE_UP_S=0.5)" in lines[-1]
    assert 3 <= len((tmp_path / "starts").read_text()) < 30


def test_a_clean_exit_is_not_restarted(tmp_path: Path) -> None:
    assert supervise(_child(tmp_path, 0), backoff=Backoff(first_s=0.01)) == 0
    assert (tmp_path / "starts").read_text() == "x"


def test_an_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown supervisor state"):
        SupervisorState().enter("sleeping")


def test_sigterm_is_passed_on_and_ends_the_worker(tmp_path: Path) -> None:
    started = tmp_path / "started"
    child = (f"import signal, sys, time; open({str(started)!r}, 'w').close(); "
             "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); time.sleep(30)")
    script = ("import sys; from app.cli.worker import supervise; "
              f"sys.exit(supervise([sys.executable, '-c', {child!r}]))")
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0


def test_sigterm_during_a_backoff_ends_it_at_once(tmp_path: Path) -> None:
    """A worker waiting 60 s to restart its dead child stops within a second of SIGTERM."""
    starts = tmp_path / "starts"
    script = ("import sys; from app.cli.worker import supervise, Backoff; "
              f"sys.exit(supervise([sys.executable, '-c', "
              f"\"open({str(starts)!r}, 'a').write('x'); raise SystemExit(5)\"], "
              "backoff=Backoff(first_s=60, max_s=60)))")
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not starts.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 5
    assert time.monotonic() - sent < 3
    assert "starting it again in 60 s" in (proc.stderr.read() if proc.stderr else "")


def test_a_broker_that_takes_writes_again_ends_the_wait_at_once(tmp_path: Path) -> None:
    """The child died while the broker refused writes: the 60 s backoff ends as soon as the
    broker takes them again."""
    asked: list[float] = []

    def broker_ok() -> bool:
        asked.append(time.monotonic())
        return len(asked) >= 3  # refused at the death and once more, then back

    lines: list[str] = []
    started = time.monotonic()
    code = supervise(_child(tmp_path, 1, die_first=1), say=lines.append, broker_ok=broker_ok,
                     backoff=Backoff(first_s=60, max_s=60))
    assert code == 0
    assert time.monotonic() - started < 20
    assert (tmp_path / "starts").read_text() == "xx"
    assert "starting it again in 60 s" in lines[0]
    assert "the broker takes writes again; starting the Celery worker" in lines[1]


def test_a_broker_that_was_fine_does_not_shorten_the_backoff(tmp_path: Path) -> None:
    """A worker that died with its broker taking writes (another cause) waits its backoff."""
    started = time.monotonic()
    code = supervise(_child(tmp_path, 1, die_first=1), say=lambda _line: None,
                     broker_ok=lambda: True, backoff=Backoff(first_s=1.5, max_s=1.5))
    assert code == 0
    assert time.monotonic() - started >= 1.5
