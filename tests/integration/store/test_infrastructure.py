"""What the infrastructure did to a run, as status and report say it: attempts it ended with
what became of their decisions, and every pause kept after the run went on (run_pauses)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.store.breaker import pause_run, unpause_run
from app.store.db import session_scope
from app.store.runs import run_info
from app.store.views import infrastructure, run_status
from tests.fixtures.report_db import RunBuilder

DB = tuple[str, sessionmaker[Session]]


@pytest.fixture
def built(report_db: DB) -> Iterator[tuple[sessionmaker[Session], int]]:
    """A run whose decisions met a lost worker, a Ctrl-C and an outage; one never recovered."""
    _, factory = report_db
    with session_scope(factory) as session:
        b = RunBuilder(session, "infra")
        for i in range(6):
            b.noul(f"d{i}", 0.7, "yes", cell=f"c{i % 2}",
                   failures=["worker_lost"] if i < 3 else ["cancelled", "cancelled"])
        b.noul("lost", None, "yes", cell="c0", failures=["server_error"] * 3)
        b.noul("bad", None, "yes", cell="c1", failures=["malformed_response"] * 2)
        run_id = b.run.id
    yield factory, run_id


def test_each_kind_counts_its_attempts_and_the_fate_of_their_decisions(
        built: tuple[sessionmaker[Session], int]) -> None:
    factory, run_id = built
    with session_scope(factory) as session:
        events = infrastructure(session, run_id)
    kinds = {k.kind: k.as_dict() for k in events.kinds}
    assert set(kinds) == {"worker_lost", "cancelled", "server_error"}  # not malformed_response
    assert kinds["cancelled"] == {"kind": "cancelled", "attempts": 6, "decisions": 3,
                                  "recovered": 3, "open": 0, "unanswered": 0}
    assert kinds["server_error"] == {"kind": "server_error", "attempts": 3, "decisions": 1,
                                     "recovered": 0, "open": 0, "unanswered": 1}
    assert events.attempts == 12 and events.unanswered == 1
    lines = events.lines()
    assert lines[0] == ("6 attempts interrupted (Ctrl-C, a worker's shutdown, or the run "
                        "cancelled): 3 decisions, all recovered")
    assert lines[1] == ("3 attempts failed: the model server answered 5xx: 1 decision: "
                        "0 recovered, 1 ended unanswered")
    assert "3 attempts lost with their worker" in lines[2] and "all recovered" in lines[2]


def test_a_pause_is_kept_after_the_run_goes_on(built: tuple[sessionmaker[Session], int]) -> None:
    factory, run_id = built
    reason = ("45 of the last 50 attempts failed with server_error (HTTP 503): check the model "
              "server and its logs, then `dreads resume infra`")
    with session_scope(factory) as session:
        assert pause_run(session, run_id, kind="breaker", reason=reason,
                         now=datetime.now(UTC))
        assert not pause_run(session, run_id, kind="breaker", reason=reason,
                             now=datetime.now(UTC))  # paused already: one pause
    with session_scope(factory) as session:
        paused = infrastructure(session, run_id)
        assert paused.lines()[-1] == ("1 pause by the breaker (45 of the last 50 attempts "
                                      "failed with server_error), still paused")
        assert unpause_run(session, run_id)
    with session_scope(factory) as session:
        events = infrastructure(session, run_id)
        assert [(p.kind, p.resumed_at is not None) for p in events.pauses] == [("breaker", True)]
        assert events.lines()[-1].endswith(", resumed")
        from app.store.models import Run

        report = run_status(session, run_info(session.get_one(Run, run_id)))
    assert report.as_dict()["infrastructure"] == events.as_dict()
    assert all(not set(c.failures) - {"malformed_response"} for c in report.cells)


def test_a_pause_ended_by_a_cancel_is_not_still_paused(
        built: tuple[sessionmaker[Session], int]) -> None:
    from app.store.admin import cancel_not_started  # what cancel does to a paused run

    factory, run_id = built
    with session_scope(factory) as session:
        assert pause_run(session, run_id, kind="breaker", reason="50 of the last 50 attempts "
                         "failed with server_error", now=datetime.now(UTC))
    with session_scope(factory) as session:
        cancel_not_started(session, run_id)
    with session_scope(factory) as session:
        events = infrastructure(session, run_id)
    assert events.lines()[-1] == ("1 pause by the breaker (50 of the last 50 attempts failed "
                                  "with server_error), the run cancelled while paused")
    assert [(p.resumed_at, p.cancelled) for p in events.pauses] == [(None, True)]
