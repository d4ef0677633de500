"""``dreads export --format csv``: a ticket run (yes/no, choice and score questions in four
cells, expected answers written every way the job file allows) run against the simulator, on
SQLite and PostgreSQL: only the columns that apply to the run, ``answer == expected`` per type,
the model's mean level apart from the truth, ``--with-state``, and the column list of
docs/commands.md#export equal to what export writes."""

from __future__ import annotations

import asyncio
import csv
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.runs.embedded import EmbeddedConfig, execute_run
from app.sim import SimOptions, start_sim_thread
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.runs import require_run
from app.tokenizer.hf import load_tokenizer
from tests.fixtures.runs_cli import CliResult, write_jobs
from tests.fixtures.services import RedisServer
from tests.fixtures.sim import MakeSim

Dreads = Callable[..., CliResult]
ROOT = Path(__file__).resolve().parents[3]

TOPICS = {"billing": "charges, invoices, refunds", "defect": "the product does not work",
          "shipping": "delivery, tracking, lost parcels", "account": "login, password, profile"}
LEVELS = ["low: can wait a week", "normal: answer within two days", "high: answer today",
          "critical: the customer cannot work"]
CELLS = ["web/en", "web/de", "mail/en", "mail/de"]
QUESTIONS = {
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "topic": {"type": "choice", "instructions": "What is the ticket about?",
              "criteria": TOPICS},
    "urgency": {"type": "score", "instructions": "How urgent is the ticket?",
                "criteria": LEVELS},
}
N = 24


def _ticket(i: int) -> tuple[dict[str, Any], dict[str, str]]:
    """Ticket ``i``: its job line, with ``expected`` given by name, letter, level text, level
    label or 0-based index in turn, and its true canvas labels (for the simulator's key)."""
    topic, level, refund = list(TOPICS)[i % 4], (i * 3) % 4, i % 5 == 0
    state = f"Ticket {i}: I write about {topic}; it is {LEVELS[level].split(':')[0]}."
    topic_given = topic if i % 2 else "ABCD"[i % 4]
    level_given: Any = (LEVELS[level], str(level + 1), level)[i % 3]
    line = {"id": f"T{i:03d}", "cell": CELLS[i % 4], "state": state, "questions": QUESTIONS,
            "expected": {"refund": "yes" if refund else "no", "topic": topic_given,
                         "urgency": level_given}}
    truth = {"refund": "yes" if refund else "no", "topic": "ABCD"[i % 4],
             "urgency": str(level + 1)}
    return line, truth


def _ticket_file(folder: Path) -> Path:
    """``tickets.jsonl`` and the simulator's key next to it (``tickets.key.jsonl``)."""
    lines, key = [], []
    for i in range(N):
        line, truth = _ticket(i)
        lines.append(orjson.dumps(line).decode())
        key += [orjson.dumps({"state": line["state"], "question": q["instructions"],
                              "label": truth[qid]}).decode() for qid, q in QUESTIONS.items()]
    write_jobs(folder / "tickets.key.jsonl", key)
    return write_jobs(folder / "tickets.jsonl", lines)


def _yes_no_file(folder: Path) -> Path:
    """Two yes/no questions, no cells."""
    lines = [orjson.dumps({
        "id": f"y{i}", "state": f"Ticket {i}: please refund me.",
        "questions": {"refund": QUESTIONS["refund"],
                      "angry": {"type": "noul", "instructions": "Is the customer angry?"}},
        "expected": {"refund": "yes", "angry": i % 2 == 0}}).decode() for i in range(6)]
    return write_jobs(folder / "yesno.jsonl", lines)


def _csv(dreads: Dreads, run: str, db: str, *args: str) -> tuple[list[str], list[dict[str, str]]]:
    result = dreads("export", run, "--format", "csv", "--database-url", db, *args)
    assert result.code == 0, result.stderr
    reader = csv.reader(io.StringIO(result.stdout))
    header = next(reader)
    return header, [dict(zip(header, row, strict=True)) for row in reader]


def _question_columns(header: list[str], qid: str) -> list[str]:
    return [c.removeprefix(f"{qid}.") for c in header if c.startswith(f"{qid}.")]


DIAGNOSTICS = ["confidence", "top_prob", "stderr", "agreement", "draws", "stop_reason",
               "label_mass", "min_label_mass", "argmax_is_label", "entropy"]


def _run_on_postgresql(dreads: Dreads, path: Path, db: str, redis: RedisServer) -> None:
    """``dreads submit`` to PostgreSQL, then the run executed as ``dreads run`` executes it,
    against the simulator with the file's key."""
    submitted = dreads("submit", str(path), "--run", "tickets", "--database-url", db,
                       "--broker", redis.url)
    assert submitted.code == 0, submitted.stderr
    engine = make_engine(db)
    factory = make_sessionmaker(engine)
    with session_scope(factory) as session:
        info = require_run(session, "tickets")
    key = str(path.with_suffix(".key.jsonl"))
    with start_sim_thread(SimOptions(key_path=key)) as sim:
        asyncio.run(execute_run(factory, info, upstream_url=sim.url,
                                tokenizer=load_tokenizer("standin"),
                                config=EmbeddedConfig(ready_timeout_s=30)))
    engine.dispose()


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_ticket_run_columns_apply_and_answers_compare(dreads: Dreads, store: str,
                                                      request: pytest.FixtureRequest,
                                                      tmp_path: Path) -> None:
    path = _ticket_file(tmp_path)
    if store == "sqlite":
        db = str(tmp_path / "t.db")
        result = dreads("run", str(path), "--upstream", "sim", "--database-url", db)
        assert result.code == 0, result.stderr
    else:
        db = request.getfixturevalue("cli_pg")
        _run_on_postgresql(dreads, path, db, request.getfixturevalue("cli_redis"))
    header, rows = _csv(dreads, "tickets", db)
    assert header[:6] == ["id", "cell", "replicate", "status", "error_kind", "error"]
    assert _question_columns(header, "refund") == ["answer", "expected", "p_yes", *DIAGNOSTICS]
    assert _question_columns(header, "topic") == [
        "answer", "expected", "label", "expected_label", "probs", *DIAGNOSTICS]
    assert _question_columns(header, "urgency") == [
        "answer", "expected", "label", "expected_label", "mean_level", "probs", *DIAGNOSTICS]
    assert len(header) == 6 + 13 + 15 + 16 and len(rows) == N
    assert [r["id"] for r in rows] == [f"T{i:03d}" for i in range(N)]
    assert {r["cell"] for r in rows} == set(CELLS)
    # every column but the errors' has a value in some row
    assert [c for c in header if all(r[c] == "" for r in rows)] == ["error_kind", "error"]
    for i, row in enumerate(rows):
        line, truth = _ticket(i)
        # expected in the answer's form, whatever form the line gave it in
        assert row["refund.expected"] == line["expected"]["refund"]
        assert row["topic.expected"] == list(TOPICS)[i % 4]
        assert row["topic.expected_label"] == truth["topic"]
        assert row["urgency.expected"] == LEVELS[(i * 3) % 4]
        assert row["urgency.expected_label"] == truth["urgency"]
        assert row["topic.answer"] in TOPICS and row["urgency.answer"] in LEVELS
        for qid in ("topic", "urgency"):  # the two forms agree on right and wrong
            right = row[f"{qid}.answer"] == row[f"{qid}.expected"]
            assert right == (row[f"{qid}.label"] == row[f"{qid}.expected_label"])
        # the model's mean level, numbered as the labels (1 = the first level)
        probs = orjson.loads(row["urgency.probs"])
        mean = sum(int(level) * p for level, p in probs.items())
        assert float(row["urgency.mean_level"]) == pytest.approx(mean)
        assert set(orjson.loads(row["topic.probs"])) == {"A", "B", "C", "D"}
    # the simulator answers near its key: most answers are right, by a plain comparison
    for qid in QUESTIONS:
        right = sum(r[f"{qid}.answer"] == r[f"{qid}.expected"] for r in rows)
        assert right >= N * 0.6, (qid, right)


def test_with_state_adds_the_state_in_csv_and_jsonl(dreads: Dreads, tmp_path: Path) -> None:
    path, db = _ticket_file(tmp_path), str(tmp_path / "t.db")
    assert dreads("run", str(path), "--upstream", "sim", "--database-url", db).code == 0
    header, _ = _csv(dreads, "tickets", db)
    assert "state" not in header
    header, rows = _csv(dreads, "tickets", db, "--with-state")
    assert header[:7] == ["id", "cell", "replicate", "status", "error_kind", "error", "state"]
    assert [r["state"] for r in rows] == [_ticket(i)[0]["state"] for i in range(N)]
    plain = dreads("export", "tickets", "--database-url", db)
    assert all("state" not in orjson.loads(line) for line in plain.stdout.splitlines())
    lines = dreads("export", "tickets", "--database-url", db, "--with-state").stdout
    first = orjson.loads(lines.splitlines()[0])
    assert first["state"] == _ticket(0)[0]["state"]
    # jsonl keeps its fields and adds the expected answer by name and the 1-based mean level
    urgency = first["answers"]["urgency"]
    assert urgency["expected"] == "1" and urgency["expected_option"] == LEVELS[0]
    assert urgency["mean_level"] == pytest.approx(urgency["expected_level"] + 1)
    assert first["answers"]["topic"]["expected_option"] == "billing"
    refused = dreads("export", "tickets", "--database-url", db, "--with-state",
                     "--format", "openai-batch")
    assert refused.code == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "--with-state" in refused.stderr


def test_yes_no_run_with_one_draw_has_no_label_or_draw_columns(dreads: Dreads,
                                                               tmp_path: Path) -> None:
    path, db = _yes_no_file(tmp_path), str(tmp_path / "y.db")
    result = dreads("run", str(path), "--upstream", "sim", "--database-url", db,
                    "--policy", "fixed", "--draws", "1")
    assert result.code == 0, result.stderr
    header, rows = _csv(dreads, "yesno", db)
    one_draw = [d for d in DIAGNOSTICS if d not in ("stderr", "agreement")]
    assert header == ["id", "replicate", "status", "error_kind", "error",
                      *(f"{q}.{c}" for q in ("refund", "angry")
                        for c in ("answer", "expected", "p_yes", *one_draw))]
    assert [r["angry.expected"] for r in rows] == ["yes", "no"] * 3
    assert {r["refund.answer"] for r in rows} <= {"yes", "no"}


def _doc_columns() -> list[tuple[str, str]]:
    """(column, its "for" cell) of the CSV table in docs/commands.md#export, in order."""
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    section = text[text.index("## export\n"):text.index("## report\n")]
    table = section[section.index("| column | for | meaning |"):]
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]+) \|", table, flags=re.MULTILINE)
    return [(name.removeprefix("Q."), where) for name, where in rows]


def test_doc_lists_the_columns_export_writes(dreads: Dreads, make_sim: MakeSim,
                                            tmp_path: Path) -> None:
    path, db = _ticket_file(tmp_path), str(tmp_path / "t.db")
    assert dreads("run", str(path), "--upstream", "sim", "--database-url", db).code == 0
    sim = make_sim()
    by_endpoint = dreads("run", str(path), "--database-url", db, "--run", "endpoint",
                         "--answer-by", "systemone", "--answer-url", sim.url)
    assert by_endpoint.code == 0, by_endpoint.stderr
    reads, _ = _csv(dreads, "tickets", db, "--with-state")
    endpoint, _ = _csv(dreads, "endpoint", db)
    assert "endpoint_confidence" not in _question_columns(reads, "refund")
    assert "stderr" not in _question_columns(endpoint, "refund")
    assert "endpoint_confidence" in _question_columns(endpoint, "refund")

    def names(header: list[str]) -> list[str]:
        out: list[str] = []
        for column in header:
            name = column.split(".", 1)[-1]
            if name not in out:
                out.append(name)
        return out

    documented = _doc_columns()
    written = names(reads)
    written += [n for n in names(endpoint) if n not in written]
    order = {name: i for i, (name, _) in enumerate(documented)}
    assert sorted(written, key=lambda n: order.get(n, -1)) == [n for n, _ in documented]
    for shown in ([c for c in reads if "." not in c],
                  *(_question_columns(h, q) for h in (reads, endpoint) for q in QUESTIONS)):
        assert [n for n, _ in documented if n in shown] == shown  # in the doc's order
    # a column documented for some question types is written for exactly those
    words = {"noul": "yes/no", "choice": "choice", "score": "score"}
    for name, where in documented:
        if any(word in where for word in words.values()):
            has = {t for t, q in (("noul", "refund"), ("choice", "topic"), ("score", "urgency"))
                   if name in _question_columns(reads, q)}
            assert has == {t for t, word in words.items() if word in where}, name
