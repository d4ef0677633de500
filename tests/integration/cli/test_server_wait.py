"""The run commands and their model server, as a user meets them: ``--wait`` for a server
that starts late (a real ``dreads sim`` process started after the command), an address
without ``http://`` refused where it is given, and an outage told in two lines, not a line
per retry."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.cli_process import DREADS, assert_one_line_error, dreads
from tests.fixtures.runs_cli import job_line, write_jobs
from tests.fixtures.services import free_port, wait_until
from tests.fixtures.sim import MakeSim

ROOT = Path(__file__).resolve().parents[3]
SMALL = ROOT / "examples" / "small.jsonl"
SMALL_KEY = ROOT / "examples" / "small.key.jsonl"


@pytest.fixture
def late_sim(tmp_path: Path) -> Iterator[Callable[[float], str]]:
    """``start_in(seconds) -> url``: a real ``dreads sim`` process started that many seconds
    from now, on a port free now; stopped after the test."""
    procs: list[subprocess.Popen[bytes]] = []
    timers: list[threading.Timer] = []

    def start_in(delay_s: float) -> str:
        port = free_port()
        log = open(tmp_path / f"sim-{port}.log", "wb")  # noqa: SIM115 - closed with the test

        def start() -> None:
            procs.append(subprocess.Popen(
                [DREADS, "sim", "--port", str(port), "--key", str(SMALL_KEY)],
                stdout=log, stderr=subprocess.STDOUT))

        timer = threading.Timer(delay_s, start)
        timer.start()
        timers.append(timer)
        return f"http://127.0.0.1:{port}"

    yield start_in
    for timer in timers:
        timer.cancel()
        timer.join(timeout=5)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


def test_run_waits_for_a_server_that_starts_late(late_sim: Callable[[float], str],
                                                 tmp_path: Path) -> None:
    """Neither model nor tokenizer set: ``run --wait`` waits for the model list, then a read,
    and the run finishes; the same command without --wait fails at once, saying so."""
    url = late_sim(4.0)
    started = time.monotonic()
    refused = dreads("run", str(SMALL), "--upstream", url, "--database-url",
                     str(tmp_path / "fast.db"), cwd=tmp_path, model=False)
    assert time.monotonic() - started < 4.0, "without --wait it must not wait"
    assert_one_line_error(refused, says=url, code=1)
    assert "if it is still loading, wait for it with --wait SECONDS" in refused.stderr
    result = dreads("run", str(SMALL), "--upstream", url, "--database-url",
                    str(tmp_path / "d.db"), "--wait", "60", cwd=tmp_path, model=False)
    assert result.code == 0, result.stderr
    assert f"waiting up to 60s for {url}" in result.stderr
    assert f"{url} ready after" in result.stderr
    assert "done 5" in result.stdout


def test_a_server_that_never_comes_fails_after_the_wait(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = dreads("run", str(SMALL), "--upstream", url, "--database-url",
                    str(tmp_path / "d.db"), "--wait", "2", cwd=tmp_path, model=False)
    waited = time.monotonic() - started
    assert 2.0 <= waited < 20, waited
    lines = result.error_lines
    assert result.code == 1 and lines[0].startswith("waiting up to 2s"), result.stderr
    assert lines[-1].startswith(f"error: {url} not ready after 2s"), result.stderr
    assert "--wait" in lines[-1] and "Traceback" not in result.stderr
    assert not (tmp_path / "d.db").exists(), "a run that never started leaves no store"


def test_submit_and_resume_wait_too(late_sim: Callable[[float], str], tmp_path: Path,
                                    pg_url: str) -> None:
    """``submit --wait`` records the server's fingerprint once it is up; ``resume --wait``
    (DREADS_WAIT_S) checks the server it waited for."""
    url = late_sim(3.0)
    env = {"DREADS_DATABASE_URL": pg_url, "DREADS_BROKER_URL": "redis://127.0.0.1:1/0"}
    result = dreads("submit", str(SMALL), "--run", "late", "--upstream", url, "--wait", "60",
                    "--json", cwd=tmp_path, env=env)
    assert result.code == 0, result.stderr
    assert f"{url} ready after" in result.stderr
    assert '"fingerprint_error":null' in result.stdout.replace(" ", "")
    resumed = dreads("resume", "late", "--upstream", url, "--dry-run", cwd=tmp_path,
                     env={**env, "DREADS_WAIT_S": "30"})
    assert resumed.code == 0, resumed.stderr
    assert f"{url} ready after" in resumed.stderr


@pytest.mark.parametrize(("args", "option"), [
    (["run", str(SMALL), "--upstream", "127.0.0.1:8001"], "--upstream"),
    (["submit", str(SMALL), "--run", "x", "--upstream", "localhost:8001"], "--upstream"),
    (["resume", "x", "--upstream", "10.0.0.7:8001"], "--upstream"),
    (["decide", str(SMALL), "--upstream", "127.0.0.1:8001"], "--upstream"),
    (["check-upstream", "127.0.0.1:8001"], "URL"),
    (["worker", "--upstream", "127.0.0.1:8001"], "--upstream"),
    (["serve", "--upstream", "127.0.0.1:8001"], "--upstream"),
    (["run", str(SMALL), "--answer-by", "decisions", "--answer-url", "api.example.com/v1"],
     "--answer-url"),
])
def test_an_address_without_a_scheme_is_named_with_its_fix(args: list[str], option: str,
                                                           tmp_path: Path) -> None:
    result = dreads(*args, cwd=tmp_path)
    value = args[args.index(option) + 1] if option.startswith("-") else args[1]
    assert_one_line_error(result, code=2, says=(f"{option} {value!r} has no scheme; did you "
                                                f"mean http://{value}?"))
    assert not (tmp_path / "dreads.db").exists()


def test_dreads_upstream_without_a_scheme_is_named_too(tmp_path: Path) -> None:
    for args in (["run", str(SMALL)], ["check-upstream"], ["worker"]):
        result = dreads(*args, cwd=tmp_path, env={"DREADS_UPSTREAM": "127.0.0.1:8001"})
        assert_one_line_error(result, code=2, says="DREADS_UPSTREAM '127.0.0.1:8001' has no "
                              "scheme; did you mean http://127.0.0.1:8001?")


def test_an_outage_is_two_lines_not_a_line_per_retry(make_sim: MakeSim, tmp_path: Path) -> None:
    """The server goes away for 2 s with 64 reads in flight: one line when reads start
    failing, one when they succeed again; the run finishes and its bar is not buried."""
    sim = make_sim(step_ms=100.0, max_batch=32, record_bodies=0)
    job = write_jobs(tmp_path / "j.jsonl", [job_line(f"d{i}") for i in range(300)])

    def outage() -> None:  # once reads flow (bounded: 60 s), the server goes away for 2 s
        wait_until(lambda: httpx.get(f"{sim.url}/sim/stats", timeout=5).json()["requests"]
                   >= 100, timeout_s=60, what="reads to flow")
        httpx.post(f"{sim.url}/sim/down", params={"seconds": 2}, timeout=5)

    thread = threading.Thread(target=outage)
    thread.start()
    result = dreads("run", str(job), "--upstream", sim.url, "--database-url",
                    str(tmp_path / "d.db"), "--concurrency", "64", cwd=tmp_path)
    thread.join(timeout=10)
    assert result.code == 0, result.stderr
    assert "done 300" in result.stdout
    failing = [line for line in result.error_lines if "failing since" in line]
    back = [line for line in result.error_lines if "succeed again" in line]
    assert len(failing) == 1 and len(back) == 1, result.stderr
    assert failing[0].startswith(f"reads at {sim.url} failing since"), failing
    assert "retried)" in back[0]
    assert not any("retry 1/" in line for line in result.error_lines), result.stderr
    assert len(result.error_lines) < 10, result.stderr
