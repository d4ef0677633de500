"""The simulator's answer key as a user writes it: answers as a job file's ``expected`` takes
them (option names, level text, a level's 0-based index, true/false) answer exactly as labels
do, through ``dreads run --upstream sim`` and a separately started ``dreads sim``; and key lines
that match no question of the job file, or name an answer their question does not offer, are
one counted warning each, in ``run``, ``sim`` and ``serve``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fixtures.cli_process import DREADS, SIM_MODEL
from tests.fixtures.runs_cli import CliResult, sqlite_rows
from tests.fixtures.services import free_port

Dreads = Callable[..., CliResult]
TOPICS = {"defect": "something does not work", "billing": None, "access": None, "other": None}
LEVELS = ["low", "normal - within the week", "high", "critical"]
QUESTIONS: dict[str, Any] = {
    "topic": {"type": "choice", "instructions": "Which subject does the ticket raise?",
              "criteria": TOPICS},
    "urgency": {"type": "score", "instructions": "How urgent is the ticket?", "criteria": LEVELS},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
N = 24
ANSWERS = ("SELECT d.key, a.question_id, a.label, a.probs FROM answers a "
           "JOIN decisions d ON d.id = a.decision_id ORDER BY d.key, a.question_id")


def _state(i: int) -> str:
    return f"Ticket {i}: the customer writes about order {1000 + i}."


def _truth(i: int) -> dict[str, int]:
    """Ticket i's true answers, as indices: topic option, urgency level, refund (0 yes, 1 no)."""
    return {"topic": i % 4, "urgency": (i // 2) % 4, "refund": 0 if i % 3 == 0 else 1}


def _labels(question: str, k: int, i: int) -> Any:
    return {"topic": "ABCD", "urgency": "1234", "refund": ("yes", "no")}[question][k]


def _names(question: str, k: int, i: int) -> Any:
    """Option names, level text (or a level's 0-based index on odd tickets), true/false."""
    if question == "topic":
        return list(TOPICS)[k]
    if question == "urgency":
        return LEVELS[k] if i % 2 == 0 else k
    return k == 0


def _key_line(i: int, question: str, answer: Any) -> bytes:
    line = {"state": _state(i), "question": QUESTIONS[question]["instructions"], "label": answer}
    return orjson.dumps(line) + b"\n"


def _job(folder: Path, answer: Callable[[str, int, int], Any]) -> Path:
    """``folder/tickets.jsonl`` and its key ``tickets.key.jsonl`` (answers written by
    ``answer``); returns the job file."""
    folder.mkdir()
    job = folder / "tickets.jsonl"
    job.write_bytes(b"".join(
        orjson.dumps({"id": f"t-{i}", "cell": f"c{i % 2}", "state": _state(i),
                      "questions": QUESTIONS,
                      "expected": {q: _labels(q, k, i) for q, k in _truth(i).items()}}) + b"\n"
        for i in range(N)))
    (folder / "tickets.key.jsonl").write_bytes(b"".join(
        _key_line(i, q, answer(q, k, i)) for i in range(N) for q, k in _truth(i).items()))
    return job


def _run(dreads: Dreads, job: Path, upstream: str = "sim") -> tuple[CliResult, list[Any]]:
    db = job.with_suffix(".db")
    result = dreads("run", str(job), "--db", str(db), "--json", "--upstream", upstream)
    assert result.code == 0, result.stderr
    return result, sqlite_rows(db, ANSWERS)


def test_key_with_option_names_and_level_text_answers_as_labels(
        dreads: Dreads, tmp_path: Path) -> None:
    by_labels, labelled = _run(dreads, _job(tmp_path / "labels", _labels))
    by_names, named = _run(dreads, _job(tmp_path / "names", _names))
    assert "warning" not in by_labels.stderr + by_names.stderr
    assert len(named) == 3 * N and named == labelled  # the same answers, to the probability
    for result in (by_labels, by_names):  # and the key was used: far above chance (0.25)
        headline = result.json()["headline"]
        for kind in ("choice", "score"):  # each question's own accuracy
            questions = headline[kind]["questions"].values()
            assert questions and all(q["figures"]["accuracy"] >= 0.7 for q in questions)


def test_separate_simulator_reads_names_from_the_prompt(
        dreads: Dreads, make_sim: Callable[..., Any], tmp_path: Path) -> None:
    """A key with no job file beside it: the default layout's prompt names the options."""
    answers = []
    for name, answer in (("labels", _labels), ("names", _names)):
        job = _job(tmp_path / name, answer)
        lone = job.with_name(f"{name}-key.jsonl")
        job.with_name("tickets.key.jsonl").rename(lone)
        sim = make_sim(key_path=str(lone))
        answers.append(_run(dreads, job, sim.url)[1])
    assert len(answers[1]) == 3 * N and answers[1] == answers[0]


def _bad_key(tmp_path: Path) -> Path:
    """A names key with 4 lines that match no question (3 name the question by its id, 1 has an
    unknown state) and 2 that name an answer their question does not offer."""
    job = _job(tmp_path / "bad", _names)
    key = job.with_name("tickets.key.jsonl")
    lines = [orjson.loads(line) for line in key.read_bytes().splitlines()]
    for n in (4, 7, 10):
        lines[n]["question"] = "topic"
    lines[1]["label"] = "urgent"
    lines[5]["label"] = "maybe"
    lines.append({"state": "Ticket 99", "question": "How urgent is the ticket?", "label": "1"})
    key.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return job


def _assert_warnings(lines: list[str], prefix: str) -> None:
    warned = [line for line in lines if line.startswith(prefix)]
    assert len(warned) == 2, lines
    unmatched, unoffered = warned
    assert "tickets.key.jsonl: 4 line(s) match no question of" in unmatched
    assert "tickets.jsonl" in unmatched and "(first: line 5: question 'topic'" in unmatched
    assert "2 line(s) name an answer their question does not offer" in unoffered
    assert "(first: line 2: 'urgent' for question 'urgency' of decision 't-0'" in unoffered


def test_run_warns_once_per_kind_of_key_problem(dreads: Dreads, tmp_path: Path) -> None:
    result, answers = _run(dreads, _bad_key(tmp_path))
    assert len(answers) == 3 * N  # the run goes on
    _assert_warnings(result.stderr.splitlines(), "warning: answer key ")


def _first_lines(args: list[str], cwd: Path, until: str) -> list[str]:
    """The stderr lines of a server command up to the one holding ``until``; then stops it."""
    proc = subprocess.Popen([DREADS, *args], cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=_env())
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if until in line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return lines


def _env() -> dict[str, str]:
    """No DREADS_* variable of the caller's, as ``tests.fixtures.cli_process.dreads`` runs."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("DREADS_")}
    return {**base, "NO_COLOR": "1", "COLUMNS": "100", **SIM_MODEL}


@pytest.mark.parametrize("server", ["sim", "serve"])
def test_servers_warn_about_their_key(server: str, tmp_path: Path) -> None:
    key = _bad_key(tmp_path).with_name("tickets.key.jsonl")
    if server == "sim":
        lines = _first_lines(["sim", "--port", "0", "--key", str(key)], tmp_path,
                             until="SIMULATOR serving")
        assert any(f"[dreads sim] answer key {key}: {3 * N + 1} line(s), read against"
                   in line for line in lines), lines
        _assert_warnings(lines, "[dreads sim] warning: answer key ")
    else:
        lines = _first_lines(["serve", "--upstream", "sim", "--sim-key", str(key), "--port",
                              str(free_port())], tmp_path, until="dreads serve:")
        _assert_warnings(lines, "warning: answer key ")
