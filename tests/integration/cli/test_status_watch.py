"""``dreads status --watch`` with its output in a pipe, as a real subprocess: a line per
interval while the run advances, the last when it has finished (exit 0); Ctrl-C ends it with
130."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import update

from app.engine import ReadSettings, settings_hash, settings_to_dict
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.models import Decision
from app.store.runs import DecisionRow, ensure_run, insert_decisions
from app.store.types import SessionFactory
from tests.fixtures.services import VENV_BIN

N = 4


@pytest.fixture
def store(sqlite_url: str) -> Iterator[tuple[str, SessionFactory, list[int]]]:
    """A SQLite store with run ``w``: ``N`` decisions, none started."""
    engine = make_engine(sqlite_url)
    factory = make_sessionmaker(engine)
    settings = ReadSettings()
    payload = {"state": "s", "questions": {"q": {"type": "noul", "instructions": "ok?"}}}
    with session_scope(factory) as session:
        run, _ = ensure_run(session, name="w", settings=settings_to_dict(settings),
                            settings_hash=settings_hash(settings), upstream="sim",
                            engine="vllm", source=None, replicates=1, fingerprint=None)
        rows = [DecisionRow(key=f"w{i}", replicate=0, cell="c", line_no=i + 1,
                            payload=payload, n_questions=1) for i in range(N)]
        ids = sorted(rid for rid, _ in insert_decisions(session, run.id, rows))
    yield sqlite_url, factory, ids
    engine.dispose()


def _settle(factory: SessionFactory, ids: list[int], status: str) -> None:
    """Settle ``ids`` as ``status``, with no answer rows: their questions count unanswered."""
    with session_scope(factory) as session:
        session.execute(update(Decision).where(Decision.id.in_(ids)).values(status=status))


@pytest.fixture
def watch(store: tuple[str, SessionFactory, list[int]]
          ) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Starts ``dreads status w --watch`` with stdout and stderr pipes; stopped at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [str(VENV_BIN / "dreads"), "status", "w", "--watch", "--interval", "0.3",
             "--database-url", store[0]],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, "COLUMNS": "200"})
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _line(proc: subprocess.Popen[bytes], *, timeout_s: float = 20.0) -> str:
    """The next line the watch writes, waiting at most ``timeout_s``."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready, f"no line in {timeout_s:.0f} s"
    return proc.stdout.readline().decode()


def _line_with(proc: subprocess.Popen[bytes], text: str, *, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = _line(proc, timeout_s=max(deadline - time.monotonic(), 0.1))
        if text in line:
            return line
        assert line, f"the watch ended before {text!r}: {seen}"
        seen.append(line)
    raise AssertionError(f"no line with {text!r} in {timeout_s:.0f} s: {seen}")


def test_a_watch_into_a_pipe_prints_a_line_per_interval_until_the_run_finishes(
        store: tuple[str, SessionFactory, list[int]],
        watch: Callable[[], subprocess.Popen[bytes]]) -> None:
    _, factory, ids = store
    proc = watch()
    first = _line(proc)
    assert " w active: done 0/4, failed 0, unanswered 0, " in first, first
    assert _line(proc).startswith(first[:4])  # another line at the next interval
    _settle(factory, ids[:2], "done")
    _line_with(proc, "active: done 2/4")
    _settle(factory, ids[2:3], "done")
    _settle(factory, ids[3:], "failed")
    last = _line_with(proc, "finished:")
    assert "done 3/4, failed 1, unanswered 4" in last, last
    assert proc.wait(timeout=10) == 0
    assert proc.stdout is not None and proc.stdout.read() == b""


def test_a_watch_of_a_finished_run_prints_one_line(
        store: tuple[str, SessionFactory, list[int]]) -> None:
    url, factory, ids = store
    _settle(factory, ids, "done")
    done = subprocess.run([str(VENV_BIN / "dreads"), "status", "w", "--watch",
                           "--database-url", url], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert line.endswith(" w finished: done 4/4, failed 0, unanswered 4, 0.00/s, ETA 0m00s")


def test_ctrl_c_ends_a_watch_with_130(watch: Callable[[], subprocess.Popen[bytes]]) -> None:
    proc = watch()
    assert "active" in _line(proc)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=10) == 130
    assert proc.stderr is not None
    assert b"stopped watching; the run goes on" in proc.stderr.read()
