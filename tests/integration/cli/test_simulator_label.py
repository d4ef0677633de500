"""Answers from the simulator are named so on every surface, whether the simulator runs in the
process (``--upstream sim``) or is a ``dreads sim`` started apart and reached at its URL: the
opening line and the summary of ``run``, ``status``, ``runs``, ``report`` (terminal, --json,
HTML), ``export``, and ``dreads serve``'s run page, run list, ``/health``, ``/v1/systemone`` and
``/v1/decisions`` answers. Every command is the real ``dreads`` in its own process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fixtures.api import StartServe
from tests.fixtures.cli_process import Result
from tests.fixtures.cli_process import dreads as dreads_process
from tests.integration.durability.harness import Sim

ROOT = Path(__file__).resolve().parents[3]
SMALL = ROOT / "examples" / "small.jsonl"
SAYS = "SIMULATOR"


@dataclass(frozen=True)
class SimRun:
    """``dreads run examples/small.jsonl`` against one kind of simulator, done."""

    upstream: str  #: "sim", or the URL of a dreads sim started apart
    db: Path
    workdir: Path
    ran: Result

    def cli(self, *args: str) -> Result:
        result = dreads_process(*args, "--database-url", str(self.db), cwd=self.workdir)
        assert result.code == 0, result.stderr
        return result


@pytest.fixture(scope="module", params=["apart", "in-process"])
def sim_run(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimRun]:
    workdir = tmp_path_factory.mktemp(f"sim-{request.param}")
    sim = Sim(workdir / "sim.log") if request.param == "apart" else None
    try:
        upstream = sim.url if sim is not None else "sim"
        db = workdir / "runs.db"
        ran = dreads_process("run", str(SMALL), "--upstream", upstream, "--database-url",
                             str(db), cwd=workdir, model=False)
        assert ran.code == 0, ran.stderr
        yield SimRun(upstream, db, workdir, ran)
    finally:
        if sim is not None:
            sim.stop()


def test_run_says_so_when_it_starts_and_in_its_summary(sim_run: SimRun) -> None:
    said = " ".join(sim_run.ran.stderr.split())
    where = sim_run.upstream if sim_run.upstream != "sim" else "http://127.0.0.1:"
    assert f"answers come from the {SAYS} (dreads sim at {where}" in said, said
    assert said.index(SAYS) < said.index("small ━"), "before the first read"
    assert f"run 'small' in {sim_run.db} (answers from the {SAYS}): done 5" in (
        " ".join(sim_run.ran.stdout.split()))


def test_status_and_runs_say_so(sim_run: SimRun) -> None:
    status = sim_run.cli("status", "small")
    assert status.stdout.splitlines()[1].startswith(f"{SAYS}: answers from dreads sim")
    assert json.loads(sim_run.cli("status", "small", "--json").stdout)["simulator"] is True
    assert SAYS in sim_run.cli("runs").stdout
    [listed] = json.loads(sim_run.cli("runs", "--json").stdout)
    assert listed["simulator"] is True


def test_report_says_so_in_every_rendering(sim_run: SimRun) -> None:
    assert f"{SAYS}: these answers come from dreads sim" in sim_run.cli("report", "small").stdout
    doc = json.loads(sim_run.cli("report", "small", "--json").stdout)
    assert doc["run"]["simulator"] is True and doc["headline"]["identity"]["simulator"] is True
    page = sim_run.workdir / "report.html"
    wrote = sim_run.cli("report", "small", "--html", str(page))
    assert f"(answers from the {SAYS})" in wrote.stdout + wrote.stderr
    assert f"{SAYS}: these answers come from dreads sim" in page.read_text()


def test_export_says_so(sim_run: SimRun) -> None:
    out = sim_run.workdir / "answers.jsonl"
    exported = sim_run.cli("export", "small", "-o", str(out))
    assert exported.stderr.splitlines()[-1].startswith(f"{SAYS}: answers from dreads sim")
    assert len(out.read_text().splitlines()) == 5


def test_served_pages_and_answers_say_so(sim_run: SimRun, serve_factory: StartServe) -> None:
    server = serve_factory("--upstream", sim_run.upstream, "--database-url",
                           f"sqlite:///{sim_run.db}")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/runs/small/live").json()["simulator"] is True
        page = client.get("/runs/small").text
        assert f'<p id="simulator" class="warn">{SAYS}' in page
        assert f'<span class="sim">{SAYS}</span>' in client.get("/runs").text
        body = {"model": "dgemma", "state": "Clause 1: the parties agree.",
                "questions": {"ok": {"type": "noul", "instructions": "Is it lawful?"}}}
        answer = client.post("/v1/systemone", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["diagnostics"]["simulator"] is True
        decision = client.post("/v1/decisions", json={
            "model": "dgemma", "input": "Clause 1: the parties agree.",
            "questions": [{"type": "predicate", "instructions": "Is it lawful?"}]})
        assert decision.status_code == 200, decision.text
        assert decision.json()["dreads"]["simulator"] is True
        assert client.get("/health").json()["simulator"] is True
