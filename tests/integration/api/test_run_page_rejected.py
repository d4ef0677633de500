"""The run page lists each rejected line of the job file once, with its replicates, and the run
list shows each run's replicates: a run of three replicates whose one long line is rejected
before any read, served by a real ``dreads serve``."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.fixtures.api import StartServe
from tests.fixtures.cli_process import dreads

ROOT = Path(__file__).resolve().parents[3]


def test_a_rejected_line_is_listed_once_with_its_replicates(serve_factory: StartServe,
                                                             tmp_path: Path) -> None:
    lines = (ROOT / "examples" / "small.jsonl").read_text().splitlines()
    long = {"id": "too-long", "cell": "C9/long", "state": "word " * 9000,
            "questions": {"q": {"type": "noul", "instructions": "Is it long?"}}}
    job = tmp_path / "rej.jsonl"
    job.write_text("\n".join([*lines, json.dumps(long)]) + "\n")
    db = tmp_path / "rej.db"
    ran = dreads("run", str(job), "--upstream", "sim", "--replicates", "3", "--database-url",
                 str(db), cwd=tmp_path)
    assert ran.code == 0, ran.stderr
    server = serve_factory("--upstream", "sim", "--database-url", f"sqlite:///{db}")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        live = client.get("/runs/rej/live").json()
        assert live["counts"]["rejected"] == 3
        [rejected] = live["rejected"]
        assert (rejected["decision"], rejected["cell"], rejected["replicates"]) == (
            "too-long", "C9/long", [0, 1, 2])
        assert "max_model_len" in rejected["reason"]
        assert "<th>replicates</th>" in client.get("/runs/rej").text
        runs = client.get("/runs").text
        assert "<th>replicates</th>" in runs and "<td>3</td>" in runs
