"""Answers given through ``/v1/systemone`` recorded into a named run, then evaluated with the
same tools as a batch run (``GET /v1/runs/{run}/results``, ``dreads report``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from typesafe_sdk import Noul, TypeSafeClient

from tests.fixtures.api import ServeProcess
from tests.fixtures.services import ROOT, VENV_BIN

SMALL = ROOT / "examples" / "small.jsonl"
KEY = ROOT / "examples" / "small.key.jsonl"


def ask(server: ServeProcess, line: dict[str, Any], **record: Any) -> httpx.Response:
    payload = {"model": "jev-latest", "state": line["state"], "questions": line["questions"]}
    if record:
        payload["dreads"] = record
    return httpx.post(f"{server.url}/v1/systemone", json=payload, timeout=30.0)


@pytest.fixture(scope="module")
def server(module_serve_factory: Callable[..., ServeProcess]) -> ServeProcess:
    return module_serve_factory("--upstream", "sim", "--sim-key", str(KEY))


def lines() -> list[dict[str, Any]]:
    return [json.loads(text) for text in SMALL.read_text().splitlines()]


def test_recorded_answers_are_a_run_with_results_and_a_report(server: ServeProcess) -> None:
    answered = {}
    for line in lines():
        response = ask(server, line, run="live", id=line["id"], cell=line["cell"],
                       expected=line["expected"])
        assert response.status_code == 200, response.text
        recorded = response.json()["diagnostics"]["recorded"]
        assert (recorded["run"], recorded["id"]) == ("live", line["id"])
        answered[line["id"]] = response.json()["diagnostics"]["questions"]
    results = [json.loads(x) for x in
               httpx.get(f"{server.url}/v1/runs/live/results").text.splitlines()]
    assert {r["id"] for r in results} == set(answered)
    for record in results:
        assert record["status"] == "done"
        for qid, answer in record["answers"].items():
            assert answer["label"] == answered[record["id"]][qid]["label"]
            assert answer["expected"] is not None
    database = server.args[server.args.index("--database-url") + 1]
    report = subprocess.run([str(VENV_BIN / "dreads"), "report", "live", "--json",
                             "--database-url", database], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, check=True)
    figures = json.loads(report.stdout)
    assert figures["run"]["name"] == "live"
    assert figures["labelled"] == {"questions": 6, "with_expected": 6, "noul": 3,
                                   "choice": 1, "score": 2}
    assert sum(q["overall"]["figures"]["n"]
               for q in figures["raw"]["noul"]["questions"].values()) == 3


def test_a_recorded_id_cannot_be_recorded_twice(server: ServeProcess) -> None:
    line = lines()[0]
    assert ask(server, line, run="twice", id="one").status_code == 200
    again = ask(server, line, run="twice", id="one")
    assert again.status_code == 409
    assert again.json()["detail"]["message"].startswith(
        "decision id 'one' is already recorded in run 'twice'")


def test_a_run_with_other_settings_is_refused_before_any_read(server: ServeProcess) -> None:
    created = httpx.post(f"{server.url}/v1/runs", params={"run": "fixed-run", "draws": 3},
                         content=SMALL.read_bytes(),
                         headers={"content-type": "application/x-ndjson"}, timeout=30.0)
    assert created.status_code == 201
    response = ask(server, lines()[0], run="fixed-run")
    assert response.status_code == 409
    assert "exists with other settings" in response.json()["detail"]["message"]


def test_the_sdk_records_through_extra_body_with_the_request_id_as_decision_id(
        server: ServeProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TYPESAFE_API_KEY", "k")
    client = TypeSafeClient(base_url=server.url)
    result = client.system_one(state="Invoice 7 was paid twice.",
                               questions={"billing": Noul(instructions="About billing?")},
                               extra_body={"dreads": {"run": "sdk-live"}})
    run = httpx.get(f"{server.url}/v1/runs/sdk-live/results").text.splitlines()
    assert [json.loads(x)["id"] for x in run] == [result.request_id]


def test_a_server_started_with_record_records_every_answer(
        serve_factory: Callable[..., ServeProcess]) -> None:
    server = serve_factory("--upstream", "sim", "--record", "traffic")
    for line in lines()[:3]:
        assert ask(server, line).status_code == 200
    status = httpx.get(f"{server.url}/v1/runs/traffic").json()
    assert status["counts"] == {"done": 3}
