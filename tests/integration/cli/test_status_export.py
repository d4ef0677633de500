"""``dreads status`` and ``dreads export`` on a PostgreSQL run executed against the simulator
(with injected malformed responses and low label mass), then ``cancel``."""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from app.runs.embedded import EmbeddedConfig, execute_run
from app.sim import SimOptions, start_sim_thread
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.runs import require_run
from app.store.views import ANSWER_FIELDS
from app.tokenizer.hf import load_tokenizer
from tests.fixtures.runs_cli import CliResult, job_line, write_jobs
from tests.fixtures.services import RedisServer

Dreads = Callable[..., CliResult]


def _two_questions(key: str) -> str:
    return orjson.dumps({
        "id": key, "cell": "c2", "state": f"Clause {key}.",
        "questions": {"ok": {"type": "noul", "instructions": "Is it lawful?"},
                      "topic": {"type": "choice", "instructions": "Which subject?",
                                "criteria": {"payment": None, "law": "governing law"}}},
        "expected": {"ok": "no", "topic": "law"}}).decode()


def _execute(db: str, run: str, url: str, *, max_attempts: int) -> None:
    engine = make_engine(db)
    factory = make_sessionmaker(engine)
    with session_scope(factory) as session:
        info = require_run(session, run)
    config = EmbeddedConfig(chunk_size=2, workers=2, max_attempts=max_attempts,
                            ready_timeout_s=30)
    asyncio.run(execute_run(factory, info, upstream_url=url,
                            tokenizer=load_tokenizer("standin"), config=config))
    engine.dispose()


@pytest.fixture(scope="module")
def finished_run(dreads: Dreads, cli_pg: str, cli_redis: RedisServer,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Run 'st': 5 decisions (cells c1, c2), first attempt malformed, second low label mass."""
    lines = [job_line("s1"), job_line("s2", expected="no"), job_line("s3"),
             job_line("s4", cell="c2"), _two_questions("s5")]
    path = write_jobs(tmp_path_factory.mktemp("st") / "st.jsonl", lines)
    assert dreads("submit", str(path), "--run", "st", "--database-url", cli_pg,
                  "--broker", cli_redis.url).code == 0
    with start_sim_thread(SimOptions(malformed_rate=1.0)) as bad:
        _execute(cli_pg, "st", bad.url, max_attempts=1)
    doc = dreads("status", "st", "--json", "--database-url", cli_pg).json()
    assert doc["counts"] == {"failed": 5}
    cells = {c["cell"]: c for c in doc["cells"]}
    assert cells["c1"]["unanswered"] == 3 and cells["c2"]["unanswered"] == 3
    assert cells["c1"]["failures"] == {"malformed_response": 3}
    with start_sim_thread(SimOptions(low_mass_rate=1.0)) as low:
        resumed = dreads("resume", "st", "--retry-failed", "--database-url", cli_pg,
                         "--broker", cli_redis.url, "--upstream", low.url)
        assert resumed.code == 0, resumed.stderr
        assert "5 failed decision(s) put back to pending" in resumed.stdout
        _execute(cli_pg, "st", low.url, max_attempts=1)
    yield "st"


def test_status_counts_per_cell(dreads: Dreads, cli_pg: str, finished_run: str) -> None:
    result = dreads("status", finished_run, "--json", "--database-url", cli_pg)
    assert result.code == 0, result.stderr
    doc = result.json()
    assert doc["counts"] == {"done": 5} and doc["remaining"] == 0 and doc["eta_s"] == 0.0
    assert doc["finished_last_1m"] == 5
    cells = {c["cell"]: c for c in doc["cells"]}
    assert (cells["c1"]["total"], cells["c1"]["done"], cells["c1"]["unanswered"]) == (3, 3, 0)
    assert (cells["c2"]["total"], cells["c2"]["questions"]) == (2, 3)
    # failures come from the attempts table: the first (malformed) attempts stay counted
    assert cells["c1"]["failures"] == {"malformed_response": 3}
    assert cells["c2"]["failures"] == {"malformed_response": 2}
    assert cells["c1"]["low_mass"] == 3 and cells["c2"]["low_mass"] == 3
    assert cells["c2"]["argmax_not_label"] == 3
    table = dreads("status", finished_run, "--database-url", cli_pg)
    assert "malformed_response 3" in table.stdout and "ETA" in table.stdout


def test_export_jsonl_and_csv(dreads: Dreads, cli_pg: str, finished_run: str,
                              tmp_path: Path) -> None:
    out = tmp_path / "st.jsonl"
    assert dreads("export", finished_run, "-o", str(out), "--database-url", cli_pg).code == 0
    records = [orjson.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == ["s1", "s2", "s3", "s4", "s5"]
    s5 = records[4]
    assert (s5["cell"], s5["replicate"], s5["status"]) == ("c2", 0, "done")
    assert set(s5["answers"]) == {"ok", "topic"}
    topic = s5["answers"]["topic"]
    assert set(ANSWER_FIELDS) <= set(topic) and topic["expected"] == "B"
    assert topic["expected_option"] == "law" and topic["mean_level"] is None
    assert topic["label"] in ("A", "B") and abs(sum(topic["probs"].values()) - 1) < 1e-6
    assert records[1]["answers"]["ok"]["expected"] == "no"
    assert records[0]["answers"]["ok"]["p_yes"] is not None
    result = dreads("export", finished_run, "--format", "csv", "--database-url", cli_pg)
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["id"] for r in rows] == ["s1", "s2", "s3", "s4", "s5"]
    assert (rows[4]["topic.expected"], rows[4]["topic.expected_label"]) == ("law", "B")
    assert rows[4]["topic.answer"] == topic["option"] and rows[0]["topic.label"] == ""
    assert float(rows[0]["ok.p_yes"]) == pytest.approx(records[0]["answers"]["ok"]["p_yes"])
    assert orjson.loads(rows[4]["topic.probs"]) == topic["probs"]


def test_cancel(dreads: Dreads, cli_pg: str, cli_redis: RedisServer, tmp_path: Path) -> None:
    path = write_jobs(tmp_path / "c.jsonl", [job_line("k1"), job_line("k2")])
    assert dreads("submit", str(path), "--run", "cx", "--database-url", cli_pg,
                  "--broker", cli_redis.url).code == 0
    result = dreads("cancel", "cx", "--database-url", cli_pg)
    assert result.code == 0 and "2 decision(s) not started are cancelled" in result.stdout
    doc = dreads("status", "cx", "--json", "--database-url", cli_pg).json()
    assert doc["status"] == "cancelled" and doc["counts"] == {"cancelled": 2}
    again = dreads("resume", "cx", "--database-url", cli_pg, "--broker", cli_redis.url)
    assert again.code == 2 and "cancelled" in again.stderr
    assert dreads("status", "nosuchrun", "--database-url", cli_pg).code == 2
