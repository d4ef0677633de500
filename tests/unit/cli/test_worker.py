"""``dreads worker`` supervises its Celery worker: restarts it when it dies on its own, ends
with it after a stop signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from app.cli.worker import supervise


def _child(tmp_path: Path, code: int) -> list[str]:
    log = tmp_path / "starts"
    return [sys.executable, "-c",
            f"open({str(log)!r}, 'a').write('x'); raise SystemExit({code})"]


def test_a_worker_that_dies_is_started_again_until_the_cap(tmp_path: Path) -> None:
    code = supervise(_child(tmp_path, 3), max_restarts=2, base_delay_s=0.01)
    assert code == 3
    assert (tmp_path / "starts").read_text() == "xxx"  # the first start + 2 restarts


def test_a_clean_exit_is_not_restarted(tmp_path: Path) -> None:
    assert supervise(_child(tmp_path, 0), max_restarts=5, base_delay_s=0.01) == 0
    assert (tmp_path / "starts").read_text() == "x"


def test_sigterm_is_passed_on_and_ends_the_worker(tmp_path: Path) -> None:
    started = tmp_path / "started"
    child = (f"import signal, sys, time; open({str(started)!r}, 'w').close(); "
             "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); time.sleep(30)")
    script = ("import sys; from app.cli.worker import supervise; "
              f"sys.exit(supervise([sys.executable, '-c', {child!r}], base_delay_s=0.01))")
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
