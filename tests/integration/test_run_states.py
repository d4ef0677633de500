"""One state and one unanswered count per run, whoever shows it: ``dreads status --json``,
``dreads runs --json``, ``dreads report --json``, the API's run endpoints, ``/metrics`` and
the live page's data, on real SQLite and PostgreSQL; and ``cancel`` leaves a finished or a
cancelled run as it is."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from typer.testing import CliRunner

from app.api import create_app_from_env
from app.cli import app as cli_app
from app.engine import ReadSettings, settings_hash, settings_to_dict
from app.store.breaker import pause_run
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.models import Answer, Attempt, Decision
from app.store.runs import DecisionRow, ensure_run, insert_decisions
from app.store.types import Session
from tests.integration.telemetry.scrape import Samples

QUESTIONS = {"q1": {"type": "noul", "instructions": "Is it lawful?"},
             "q2": {"type": "noul", "instructions": "Is it fair?"}}
#: A decision: (cell, status, questions answered); "leased" is held by a live worker.
Plan = list[tuple[str, str, int]]


@dataclass(frozen=True)
class Expected:
    plan: Plan
    state: str
    unanswered: dict[str, int]  #: per cell
    cancel: bool = False  #: ``dreads cancel`` it once built
    pause: bool = False  #: paused by the breaker once built


RUNS = {
    # every decision settled, one question refused by its source
    "settled": Expected([("a", "done", 2), ("a", "done", 2), ("b", "done", 2), ("b", "done", 1)],
                        "finished", {"a": 0, "b": 1}),
    "partly-failed": Expected([("a", "done", 2), ("a", "failed", 0), ("b", "done", 2),
                               ("b", "failed", 0), ("b", "done", 2)],
                              "finished", {"a": 2, "b": 2}),
    # cancelled with two decisions done, one on a worker, three never started
    "cancelled-midway": Expected([("a", "done", 2), ("a", "pending", 0), ("a", "pending", 0),
                                  ("b", "done", 2), ("b", "leased", 0), ("b", "queued", 0)],
                                 "cancelled", {"a": 4, "b": 2}, cancel=True),
    "running": Expected([("a", "done", 2), ("a", "pending", 0), ("b", "leased", 0)],
                        "active", {"a": 0, "b": 0}),
    # paused by the breaker with one decision done and two waiting for resume
    "paused": Expected([("a", "done", 2), ("a", "pending", 0), ("b", "queued", 0)],
                       "paused", {"a": 0, "b": 0}, pause=True),
}
PAUSE_REASON = ("50 of the last 50 attempts failed with server_error (server error 500: boom): "
                "check the model server and its logs, then `dreads resume paused`")


def _build(session: Session, name: str, expected: Expected) -> None:
    plan = expected.plan
    settings = ReadSettings()
    run, _ = ensure_run(session, name=name, settings=settings_to_dict(settings),
                        settings_hash=settings_hash(settings), upstream="sim", engine="vllm",
                        source=None, replicates=1, fingerprint=None)
    payload = {"state": "s", "questions": QUESTIONS}
    rows = [DecisionRow(key=f"{name}-{i}", replicate=0, cell=cell, line_no=i + 1,
                        payload=payload, n_questions=len(QUESTIONS))
            for i, (cell, _, _) in enumerate(plan)]
    ids = sorted(rid for rid, _ in insert_decisions(session, run.id, rows))
    for did, (_, status, answered) in zip(ids, plan, strict=True):
        _settle(session, run.id, did, status, answered)
    if expected.pause:
        assert pause_run(session, run.id, kind="breaker", reason=PAUSE_REASON,
                         now=datetime.now(UTC))


def _settle(session: Session, run_id: int, did: int, status: str, answered: int) -> None:
    lease = datetime.now(UTC) + timedelta(minutes=10) if status == "leased" else None
    session.execute(update(Decision).where(Decision.id == did).values(
        status=status, lease_token="t" if lease else None, lease_expires_at=lease))
    if not answered:
        return
    attempt = Attempt(run_id=run_id, decision_id=did, outcome="ok", won=True)
    session.add(attempt)
    session.flush()
    for qid in list(QUESTIONS)[:answered]:
        session.add(Answer(
            run_id=run_id, decision_id=did, attempt_id=attempt.id, question_id=qid,
            question_type="noul", label="yes", option="yes", probs={"yes": 0.8, "no": 0.2},
            p_yes=0.8, confidence=0.8, top_prob=0.8, draws=1, stop_reason="near_certain",
            label_mass=0.9, min_label_mass=0.9, argmax_is_label=True, entropy=0.5))


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, make_database: Callable[..., str]) -> str:
    url = make_database(request.param)
    engine = make_engine(url)
    with session_scope(make_sessionmaker(engine)) as session:
        for name, expected in RUNS.items():
            _build(session, name, expected)
    engine.dispose()
    return url


@pytest.fixture
def cli_on_database(database: str) -> Callable[..., Any]:
    """The ``dreads`` command (in-process) on ``database``:
    ``cli_on_database("status", "r", "--json")`` -> (exit code, stdout)."""
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli_app, [*args, "--database-url", database],
                               catch_exceptions=False, env={"COLUMNS": "200", "NO_COLOR": "1"})
        return result.exit_code, result.stdout

    return invoke


@pytest.fixture
def api(database: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("DREADS_UPSTREAM", "sim")
    monkeypatch.setenv("DREADS_DATABASE_URL", database)
    monkeypatch.setenv("DREADS_API_EXECUTOR", "local")
    with TestClient(create_app_from_env(), base_url="http://127.0.0.1") as client:
        yield client


def _json(cli: Callable[..., Any], *args: str) -> Any:
    code, out = cli(*args, "--json")
    assert code == 0, out
    return orjson.loads(out)


def _cells(cells: list[dict[str, Any]]) -> dict[str, int]:
    return {c["cell"]: c["unanswered"] for c in cells}


def _views(cli: Callable[..., Any], api: TestClient, name: str,
           runs: dict[str, Any], metrics: Samples) -> dict[str, tuple[str, dict[str, int]]]:
    """Each view's (state, unanswered per cell) of run ``name``."""
    status = _json(cli, "status", name)
    report = _json(cli, "report", name)
    endpoint = api.get(f"/v1/runs/{name}").json()
    live = api.get(f"/runs/{name}/live").json()
    listed = {r["name"]: r["status"] for r in api.get("/v1/runs").json()["runs"]}
    state = metrics.by("dreads_run_state", "state", run=name)
    return {
        "status": (status["status"], _cells(status["cells"])),
        "runs": (runs[name], _cells(status["cells"])),
        "report": (report["run"]["status"],
                   {c: d["unanswered"] for c, d in report["diagnostics"]["cells"].items()}),
        "api": (endpoint["status"], _cells(endpoint["cells"])),
        "api list": (listed[name], _cells(endpoint["cells"])),
        "live": (live["status"], _cells(live["cells"])),
        "metrics": ([s for s, v in state.items() if v == 1.0] or ["absent"])[0],
        "metrics cells": {c: int(n) for c, n in
                          metrics.by("dreads_run_unanswered_questions", "cell",
                                     run=name).items()},
    }


def test_every_view_gives_one_state_and_one_unanswered_count(
        cli_on_database: Callable[..., Any], api: TestClient) -> None:
    code, out = cli_on_database("cancel", "cancelled-midway")
    assert code == 0, out
    runs = {r["name"]: r["status"] for r in _json(cli_on_database, "runs")}
    metrics = Samples(api.get("/metrics").text)
    for name, expected in RUNS.items():
        views = _views(cli_on_database, api, name, runs, metrics)
        want = (expected.state, expected.unanswered)
        assert {k: v for k, v in views.items() if not k.startswith("metrics")} == {
            k: want for k in views if not k.startswith("metrics")}, name
        assert {k: v for k, v in views.items() if k.startswith("metrics")} == {
            "metrics": expected.state, "metrics cells": expected.unanswered}, name
        status = _json(cli_on_database, "status", name)
        assert status["unanswered"] == sum(expected.unanswered.values()), name


def test_cancel_changes_nothing_on_a_finished_or_cancelled_run(
        cli_on_database: Callable[..., Any], api: TestClient) -> None:
    before = _json(cli_on_database, "status", "partly-failed")["counts"]
    code, out = cli_on_database("cancel", "partly-failed")
    assert (code, out.strip()) == (0, "run 'partly-failed' is finished (3 done, 2 failed): "
                                      "nothing to cancel")
    after = _json(cli_on_database, "status", "partly-failed")
    assert (after["status"], after["counts"]) == ("finished", before)

    assert cli_on_database("cancel", "cancelled-midway")[0] == 0
    code, out = cli_on_database("cancel", "cancelled-midway")
    assert code == 0
    assert out.splitlines()[0] == ("run 'cancelled-midway' is already cancelled (1 leased, 2 "
                                   "done, 3 cancelled): nothing to change")

    answer = api.post("/v1/runs/settled/cancel")
    assert answer.status_code == 200
    assert answer.json() == {"run": "settled", "cancelled": 0, "in_flight": 0,
                             "state": "finished", "changed": False, "counts": {"done": 4}}
    assert api.get("/v1/runs/settled").json()["status"] == "finished"
    again = api.post("/v1/runs/cancelled-midway/cancel").json()
    assert (again["state"], again["changed"], again["in_flight"]) == ("cancelled", False, 1)


def test_every_view_says_why_a_paused_run_paused(
        cli_on_database: Callable[..., Any], api: TestClient) -> None:
    code, out = cli_on_database("status", "paused")
    assert code == 0 and f"paused: {PAUSE_REASON}" in " ".join(out.split()), out
    pause = {"kind": "breaker", "reason": PAUSE_REASON}
    views = {"status": _json(cli_on_database, "status", "paused")["paused"],
             "runs": {r["name"]: r for r in _json(cli_on_database, "runs")}["paused"]["paused"],
             "api": api.get("/v1/runs/paused").json()["paused"],
             "live": api.get("/runs/paused/live").json()["paused"]}
    for view, shown in views.items():
        assert {k: shown[k] for k in pause} == pause and shown["since"], view
    assert _json(cli_on_database, "status", "paused")["eta_s"] is None  # nothing runs until resume
    assert _json(cli_on_database, "status", "running")["paused"] is None
    code, out = cli_on_database("status", "paused", "--watch", "--interval", "0.2")  # stops, exit 1
    assert code == 1 and out.startswith(tuple("0123456789")) and " paused: done 1/3" in out
    code, out = cli_on_database("cancel", "paused")  # a paused run can still be cancelled
    assert code == 0, out
    assert _json(cli_on_database, "status", "paused")["status"] == "cancelled"
