"""``dreads serve`` running runs answered by a decision endpoint, and another ``dreads serve``
as that endpoint (its ``/v1/systemone`` and ``/v1/decisions``, behind its API key): one
request per decision, one draw per question, the endpoint's diagnostics kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from tests.fixtures.api import ServeProcess
from tests.fixtures.services import wait_until

StartServe = Callable[..., ServeProcess]
NDJSON = {"content-type": "application/x-ndjson"}
N = 8


def lines() -> bytes:
    out = []
    for i in range(N):
        out.append(orjson.dumps({
            "id": f"q{i}", "cell": f"c{i % 2}", "state": f"Invoice {i} was paid {i} days late.",
            "questions": {
                "late": {"type": "noul", "instructions": "Was it paid late?"},
                "size": {"type": "choice", "instructions": "How late?",
                         "criteria": {"not": None, "a little": "under a week",
                                      "very": "a week or more"}}},
            "expected": {"late": "yes" if i else "no"}}))
    return b"\n".join(out) + b"\n"


def run_status(server: ServeProcess, run: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v1/runs/{run}", timeout=10.0)
    response.raise_for_status()
    return dict(response.json())


def results(server: ServeProcess, run: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{server.url}/v1/runs/{run}/results", timeout=30.0)
    return [orjson.loads(line) for line in response.text.splitlines()]


@pytest.mark.parametrize("answer_by", ["systemone", "decisions"])
def test_serve_runs_a_run_answered_by_another_dreads_serve(
        serve_factory: StartServe, answer_by: str) -> None:
    endpoint = serve_factory("--upstream", "sim", env={"DREADS_API_KEY": "k-endpoint"})
    server = serve_factory("--upstream", "sim", env={"DREADS_ANSWER_API_KEY": "k-endpoint",
                                                     "DREADS_ANSWER_URL": endpoint.url})
    response = httpx.post(f"{server.url}/v1/runs", content=lines(), headers=NDJSON, timeout=60,
                          params={"run": "hosted", "answer_by": answer_by,
                                  "answer_url": endpoint.url, "answer_concurrency": 4})
    assert response.status_code == 201, response.text
    wait_until(lambda: run_status(server, "hosted")["remaining"] == 0, timeout_s=90,
               what="the run answered by the other server", interval_s=0.3)
    status = run_status(server, "hosted")
    assert status["counts"] == {"done": N}
    assert all(not cell["failures"] for cell in status["cells"])
    listed = httpx.get(f"{server.url}/v1/runs", timeout=10).json()["runs"]
    settings = next(r for r in listed if r["name"] == "hosted")["settings"]
    assert (settings["answer_by"], settings["answer_url"]) == (answer_by, endpoint.url)
    assert "k-endpoint" not in orjson.dumps(listed).decode()
    for record in results(server, "hosted"):
        for answer in record["answers"].values():
            assert answer["answered"] and answer["draws"] == 1
            assert answer["stop_reason"] == "endpoint"
            assert answer["label_mass"] is not None  # another dreads gives its diagnostics
    if answer_by == "decisions":  # OpenAI's shape: a choice's confidence comes back
        sizes = [r["answers"]["size"]["endpoint_confidence"] for r in results(server, "hosted")]
        assert all(c is not None and 0 < c <= 1 for c in sizes)


def test_serve_refuses_a_model_for_a_run_answered_by_reads_and_an_unknown_source(
        serve_factory: StartServe) -> None:
    server = serve_factory("--upstream", "sim")
    response = httpx.post(f"{server.url}/v1/runs", content=lines(), headers=NDJSON, timeout=60,
                          params={"run": "x", "model": "other"})
    assert response.status_code == 400
    assert "decision endpoint" in response.text
    response = httpx.post(f"{server.url}/v1/runs", content=lines(), headers=NDJSON, timeout=60,
                          params={"run": "y", "answer_by": "nobody"})
    assert response.status_code in (400, 422)
    assert "unknown answer source 'nobody'" in response.text


def test_serve_defaults_the_endpoint_to_its_own_upstream(serve_factory: StartServe) -> None:
    """The one-pod second opinion: the same server's upstream answers by its own reader."""
    server = serve_factory("--upstream", "sim")
    for run, params in (("reads", {"draws": 1}), ("vllm", {"answer_by": "systemone"})):
        response = httpx.post(f"{server.url}/v1/runs", content=lines(), headers=NDJSON,
                              timeout=60, params={"run": run, **params})
        assert response.status_code == 201, response.text
        wait_until(lambda r=run: run_status(server, r)["remaining"] == 0, timeout_s=90,
                   what=f"run {run}", interval_s=0.3)
    by_reads = {r["id"]: r["answers"] for r in results(server, "reads")}
    by_vllm = {r["id"]: r["answers"] for r in results(server, "vllm")}
    assert by_reads.keys() == by_vllm.keys() and len(by_vllm) == N
    for key, answers in by_vllm.items():
        for qid, answer in answers.items():
            assert answer["stop_reason"] == "endpoint"
            assert answer["probs"] == pytest.approx(by_reads[key][qid]["probs"], abs=1e-9)
