"""Runs over HTTP: ``POST /v1/runs`` then status, results, resume and cancel, against the
simulator, with the server's own executor (SQLite) and with Celery workers (PostgreSQL +
Redis). Results must be exactly what ``dreads export`` writes."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.sim import SimHandle, SimOptions, start_sim_thread
from tests.fixtures.api import ServeProcess
from tests.fixtures.services import ROOT, VENV_BIN, RedisServer, WorkerProcess, wait_until

SMALL = ROOT / "examples" / "small.jsonl"
KEY = ROOT / "examples" / "small.key.jsonl"
CONTRACTS = ROOT / "examples" / "contracts.jsonl"
NDJSON = {"content-type": "application/x-ndjson"}


def submit(server: ServeProcess, data: bytes, **params: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/runs", params=params, content=data, headers=NDJSON,
                      timeout=60.0)


def status(server: ServeProcess, run: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v1/runs/{run}", timeout=10.0)
    response.raise_for_status()
    return dict(response.json())


def wait_finished(server: ServeProcess, run: str, timeout_s: float = 90.0) -> dict[str, Any]:
    wait_until(lambda: status(server, run)["remaining"] == 0, timeout_s=timeout_s,
               what=f"run {run} to finish", interval_s=0.3)
    return status(server, run)


def results(server: ServeProcess, run: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{server.url}/v1/runs/{run}/results", timeout=30.0)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines()]


def cli_json(*args: str) -> Any:
    out = subprocess.run([str(VENV_BIN / "dreads"), *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout


def database_of(server: ServeProcess) -> str:
    return server.args[server.args.index("--database-url") + 1]


@pytest.fixture(scope="module")
def local(module_serve_factory: Callable[..., ServeProcess]) -> ServeProcess:
    """The server runs the runs itself, on SQLite, against a simulator with the answer key."""
    return module_serve_factory("--upstream", "sim", "--sim-key", str(KEY))


def test_a_submitted_file_round_trips_to_the_same_results_as_dreads_export(
        local: ServeProcess) -> None:
    data = SMALL.read_bytes() + b'{"id": "broken", "state": "x"}\nnot json\n'
    response = submit(local, data, run="small")
    assert response.status_code == 201
    report = response.json()
    assert (report["created"], report["valid"], report["inserted"]) == (True, 5, 5)
    assert [(p["line"], p["reason"]) for p in report["bad_lines"]] == [
        (6, "decision 'broken': 'questions' must be a non-empty object {question id: spec}"),
        (7, report["bad_lines"][1]["reason"])]
    assert report["bad_lines"][1]["reason"].startswith("not valid JSON")
    assert report["execution"] == {"executor": "local", "running": True}
    assert report["links"]["results"] == "/v1/runs/small/results"
    finished = wait_finished(local, "small")
    assert finished["counts"] == {"done": 5}
    lines = results(local, "small")
    assert [r["status"] for r in lines] == ["done"] * 5
    assert all(a["answered"] for r in lines for a in r["answers"].values())
    exported = cli_json("export", "small", "--database-url", database_of(local))
    assert lines == [json.loads(line) for line in exported.splitlines()]


def test_status_is_what_dreads_status_json_says(local: ServeProcess) -> None:
    submit(local, SMALL.read_bytes(), run="status-check")
    over_http = wait_finished(local, "status-check")
    from_cli = json.loads(cli_json("status", "status-check", "--json",
                                   "--database-url", database_of(local)))
    volatile = {"rate_per_s", "eta_s", "finished_last_1m", "finished_last_5m"}
    assert {k: v for k, v in over_http.items() if k not in volatile | {"execution", "links"}} \
        == {k: v for k, v in from_cli.items() if k not in volatile}
    assert over_http["execution"] == {"executor": "local", "running": False, "error": None}


def test_a_multipart_upload_is_a_run_too(local: ServeProcess) -> None:
    with SMALL.open("rb") as handle:
        response = httpx.post(f"{local.url}/v1/runs", params={"run": "uploaded",
                                                              "policy": "fixed", "draws": 2},
                              files={"file": ("small.jsonl", handle)}, timeout=60.0)
    assert response.status_code == 201, response.text
    assert response.json()["valid"] == 5
    wait_finished(local, "uploaded")
    assert {a["draws"] for r in results(local, "uploaded") for a in r["answers"].values()} == {2}
    listed = httpx.get(f"{local.url}/v1/runs").json()["runs"]
    run = next(r for r in listed if r["name"] == "uploaded")
    assert run["settings"]["policy"] == "fixed" and run["settings"]["fixed_draws"] == 2
    assert run["counts"] == {"done": 5}


def test_more_lines_for_a_run_need_its_own_settings(local: ServeProcess) -> None:
    assert submit(local, SMALL.read_bytes(), run="settled").status_code == 201
    again = submit(local, SMALL.read_bytes(), run="settled", max_draws=2)
    assert again.status_code == 409
    detail = again.json()["detail"]
    assert detail["error_type"] == "conflict_error"
    assert "max_draws: 4 -> 2" in detail["message"]
    same = submit(local, SMALL.read_bytes(), run="settled")
    assert same.status_code == 200
    assert (same.json()["inserted"], same.json()["already_present"]) == (0, 5)


def test_strict_refuses_the_whole_file_and_writes_nothing(local: ServeProcess) -> None:
    response = submit(local, SMALL.read_bytes() + b"{}\n", run="strict", strict="true")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail["report"]["refused"] is True
    assert detail["report"]["bad_lines"][0]["line"] == 6
    assert httpx.get(f"{local.url}/v1/runs/strict").status_code == 404


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/runs/nope"), ("GET", "/v1/runs/nope/results"),
    ("POST", "/v1/runs/nope/resume"), ("POST", "/v1/runs/nope/cancel")])
def test_an_unknown_run_is_404_saying_where_runs_are_listed(
        local: ServeProcess, method: str, path: str) -> None:
    response = httpx.request(method, f"{local.url}{path}")
    assert response.status_code == 404
    assert response.json()["detail"] == {
        "error_type": "not_found_error", "message": "no run named 'nope'; GET /v1/runs lists them"}


def test_a_body_that_is_not_json_lines_is_refused_with_what_to_send(local: ServeProcess) -> None:
    response = httpx.post(f"{local.url}/v1/runs", params={"run": "x"}, content=b"<xml/>",
                          headers={"content-type": "application/xml"})
    assert response.status_code == 415
    assert "application/x-ndjson" in response.json()["detail"]["message"]
    empty = submit(local, b"\n  \n", run="empty")
    assert empty.status_code == 400 and "no decisions" in empty.json()["detail"]["message"]
    assert httpx.get(f"{local.url}/v1/runs/empty").status_code == 404


def test_a_line_that_is_not_utf8_is_a_bad_line_and_the_good_lines_run(
        local: ServeProcess) -> None:
    lines = SMALL.read_bytes().splitlines(keepends=True)
    latin = '{"id": "caf\u00e9", "state": "x"}\n'.encode("latin-1")
    body = b"".join(lines[:2]) + latin + b"".join(lines[2:])
    response = submit(local, body, run="latin")
    assert response.status_code == 201, response.text
    report = response.json()
    assert report["valid"] == 5 and report["inserted"] == 5
    [bad] = report["bad_lines"]
    assert bad["line"] == 3 and "not UTF-8" in bad["reason"]
    assert f"offset {len(lines[0]) + len(lines[1]) + 11} of the file" in bad["reason"]
    only_bad = submit(local, latin, run="all-bad")
    assert only_bad.status_code == 400
    assert only_bad.json()["detail"]["report"]["bad_lines"][0]["line"] == 1
    assert httpx.get(f"{local.url}/v1/runs/all-bad").status_code == 404


def test_delete_removes_a_run_and_cancel_says_what_was_in_flight(local: ServeProcess) -> None:
    assert submit(local, SMALL.read_bytes(), run="gone").status_code == 201
    wait_finished(local, "gone")
    cancelled = httpx.post(f"{local.url}/v1/runs/gone/cancel", timeout=10.0).json()
    assert cancelled == {"run": "gone", "cancelled": 0, "in_flight": 0, "state": "finished",
                         "changed": False, "counts": {"done": 5}}
    deleted = httpx.delete(f"{local.url}/v1/runs/gone", timeout=10.0)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["deleted"]["decisions"] == 5
    assert httpx.get(f"{local.url}/v1/runs/gone").status_code == 404
    assert httpx.delete(f"{local.url}/v1/runs/gone").status_code == 404


# -- durability: a killed server, then resume ------------------------------------------------
@pytest.fixture
def slow_sim() -> Iterator[SimHandle]:
    handle = start_sim_thread(SimOptions(step_ms=150, max_batch=8))
    yield handle
    handle.stop()


def test_a_killed_server_loses_nothing_and_resume_finishes_the_run(
        serve_factory: Callable[..., ServeProcess], slow_sim: SimHandle, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'durable.db'}"
    data = b"".join(CONTRACTS.read_bytes().splitlines(keepends=True)[:80])
    first = serve_factory("--upstream", slow_sim.url, "--database-url", database)
    assert submit(first, data, run="durable").status_code == 201
    def part_done_and_leased() -> bool:
        counts = status(first, "durable")["counts"]
        return 0 < counts.get("done", 0) < 60 and counts.get("leased", 0) > 0

    wait_until(part_done_and_leased, timeout_s=60, what="a run part done, leases held",
               interval_s=0.05)
    first.kill()
    second = serve_factory("--upstream", slow_sim.url, "--database-url", database)
    left = status(second, "durable")
    assert left["remaining"] > 0 and left["execution"]["running"] is False
    assert left["counts"].get("leased", 0) > 0  # held by the killed server
    resumed = httpx.post(f"{second.url}/v1/runs/durable/resume", timeout=30.0)
    assert resumed.status_code == 200
    assert resumed.json()["execution"]["reclaimed_leases"] == left["counts"].get("leased", 0)
    finished = wait_finished(second, "durable", timeout_s=120)
    assert finished["counts"] == {"done": 80}
    lines = results(second, "durable")
    assert len({r["id"] for r in lines}) == 80
    assert all(a["answered"] for r in lines for a in r["answers"].values())


def test_a_stopped_server_hands_its_leases_back_before_it_exits(
        serve_factory: Callable[..., ServeProcess], slow_sim: SimHandle, tmp_path: Path) -> None:
    """SIGTERM: uvicorn's shutdown cancels the run's task and puts its leases back to pending
    (a ``cancelled`` attempt each), so the next server has nothing to reclaim."""
    database = f"sqlite:///{tmp_path / 'graceful.db'}"
    data = b"".join(CONTRACTS.read_bytes().splitlines(keepends=True)[:80])
    first = serve_factory("--upstream", slow_sim.url, "--database-url", database)
    assert submit(first, data, run="graceful").status_code == 201
    wait_until(lambda: status(first, "graceful")["counts"].get("leased", 0) > 0, timeout_s=60,
               what="leased decisions", interval_s=0.1)
    assert first.terminate(timeout_s=60) in (0, -15)  # uvicorn re-raises SIGTERM after shutdown
    second = serve_factory("--upstream", slow_sim.url, "--database-url", database)
    left = status(second, "graceful")
    assert left["counts"].get("leased", 0) == 0 and left["remaining"] > 0
    resumed = httpx.post(f"{second.url}/v1/runs/graceful/resume", timeout=30.0).json()
    assert resumed["execution"]["reclaimed_leases"] == 0
    assert wait_finished(second, "graceful", timeout_s=120)["counts"] == {"done": 80}


def test_cancel_stops_a_run_and_resume_then_refuses_it(
        serve_factory: Callable[..., ServeProcess], slow_sim: SimHandle) -> None:
    server = serve_factory("--upstream", slow_sim.url)
    assert submit(server, CONTRACTS.read_bytes(), run="big").status_code == 201
    cancelled = httpx.post(f"{server.url}/v1/runs/big/cancel", timeout=30.0)
    assert cancelled.status_code == 200 and cancelled.json()["cancelled"] > 900
    wait_until(lambda: not status(server, "big")["execution"]["running"], timeout_s=60,
               what="the executor to let the cancelled run go")
    after = status(server, "big")
    assert after["status"] == "cancelled"
    assert after["counts"]["cancelled"] == cancelled.json()["cancelled"]
    again = httpx.post(f"{server.url}/v1/runs/big/resume", timeout=30.0)
    assert again.status_code == 409
    assert "was cancelled" in again.json()["detail"]["message"]


# -- the queue executor: PostgreSQL, Redis and a real worker ----------------------------------
def test_runs_over_http_are_executed_by_celery_workers(
        serve_factory: Callable[..., ServeProcess], pg_url: str, redis_server: RedisServer,
        worker_factory: Callable[..., WorkerProcess]) -> None:
    sim = start_sim_thread(SimOptions(key_path=str(KEY)))
    try:
        env = {"DREADS_BROKER_URL": redis_server.url, "DREADS_DATABASE_URL": pg_url}
        server = serve_factory("--upstream", sim.url, "--database-url", pg_url, env=env)
        assert httpx.get(f"{server.url}/health").json()["executor"] == "queue"
        response = submit(server, SMALL.read_bytes(), run="queued")
        assert response.status_code == 201
        execution = response.json()["execution"]
        assert (execution["executor"], execution["published"]) == ("queue", 5)
        time.sleep(0.5)
        assert status(server, "queued")["counts"] == {"queued": 5}
        worker_factory({**env, "DREADS_UPSTREAM": sim.url}, concurrency=1)
        wait_finished(server, "queued", timeout_s=120)
        lines = results(server, "queued")
        assert [r["status"] for r in lines] == ["done"] * 5
        resumed = httpx.post(f"{server.url}/v1/runs/queued/resume", timeout=30.0).json()
        assert resumed["execution"]["sweep"]["published"] == 0
    finally:
        sim.stop()


def test_a_changed_line_under_an_existing_id_is_a_409_listing_it_and_the_rest_is_stored(
        local: ServeProcess) -> None:
    lines = SMALL.read_bytes().splitlines()
    first = json.loads(lines[0])
    assert submit(local, b"\n".join(lines[:2]) + b"\n", run="changed").status_code == 201
    assert submit(local, b"\n".join(lines[:2]) + b"\n", run="changed").status_code == 200
    first["state"] = first["state"] + " (corrected)"
    body = json.dumps(first).encode() + b"\n" + lines[1] + b"\n" + lines[2] + b"\n"
    response = submit(local, body, run="changed")
    assert response.status_code == 409, response.text
    detail = response.json()["detail"]
    assert detail["error_type"] == "conflict_error"
    assert f"ids: {first['id']}" in detail["message"]
    assert "replace_changed=true" in detail["message"]
    report = detail["report"]
    assert [p["id"] for p in report["changed"]] == [first["id"]]
    assert (report["inserted"], report["already_present"]) == (1, 1)
    assert report["links"] == {"status": "/v1/runs/changed",
                               "results": "/v1/runs/changed/results"}
