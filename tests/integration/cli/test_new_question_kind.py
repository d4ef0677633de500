"""A fourth question kind, "ab", that exists only in the tests (``tests.fixtures.ab_kind``),
runs end to end with no edit to ``app/``: job file, simulator, answers, export and report.
Registered in-process, then installed as a plugin (an entry point) for a real ``dreads``."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from app.engine import register_kind
from app.engine.kinds import unregister_kind
from tests.fixtures.ab_kind import AbKind, ab_plugin_path
from tests.fixtures.cli_process import dreads as dreads_process
from tests.fixtures.runs_cli import CliResult

Dreads = Callable[..., CliResult]
ROOT = Path(__file__).resolve().parents[3]
QUESTION = "Is the item of kind a or kind b?"
N = 6


def _job(tmp_path: Path) -> Path:
    """N decisions asking one "ab" question, half expected a, half b, and the simulator's
    answer key beside them (it answers each with its key label)."""
    lines, key = [], []
    for i in range(N):
        label = "a" if i % 2 == 0 else "b"
        state = f"Item {i} is plainly of kind {label}."
        lines.append({"id": f"d{i}", "cell": f"c{i % 2}", "state": state,
                      "questions": {"kind": {"type": "ab", "instructions": QUESTION}},
                      "expected": {"kind": label}})
        key.append({"state": state, "question": QUESTION, "label": label})
    path = tmp_path / "ab.jsonl"
    path.write_text("".join(orjson.dumps(x).decode() + "\n" for x in lines))
    (tmp_path / "ab.key.jsonl").write_text("".join(orjson.dumps(x).decode() + "\n"
                                                   for x in key))
    return path


@pytest.fixture
def ab_kind() -> Iterator[AbKind]:
    kind = register_kind(AbKind())
    assert isinstance(kind, AbKind)
    yield kind
    unregister_kind(kind.name)


def test_a_kind_registered_in_a_test_runs_end_to_end(dreads: Dreads, tmp_path: Path,
                                                    ab_kind: AbKind) -> None:
    db = str(tmp_path / "ab.db")
    ran = dreads("run", str(_job(tmp_path)), "--upstream", "sim", "--db", db)
    assert ran.code == 0, ran.stderr
    assert "a/b accuracy" in ran.stdout  # the run's headline has the kind's figure

    lines = [json.loads(x) for x in dreads("export", "ab", "--database-url", db).stdout.split(
        "\n") if x.strip()]
    assert len(lines) == N
    answers = [line["answers"]["kind"] for line in lines]
    assert {a["label"] for a in answers} <= {"a", "b"}
    assert [a["label"] for a in answers] == [a["expected"] for a in answers]

    table = list(csv.DictReader(io.StringIO(
        dreads("export", "ab", "--format", "csv", "--database-url", db).stdout)))
    assert len(table) == N and {"kind.label", "kind.probs"} <= set(table[0])
    assert "kind.p_yes" not in table[0]  # an option kind, not a yes/no

    report = dreads("report", "ab", "--json", "--database-url", db)
    assert report.code == 0, report.stderr
    doc = report.json()
    assert doc["labelled"]["ab"] == N
    (section,) = doc["raw"]["ab"]["questions"].values()
    assert section["overall"]["figures"]["accuracy"] == 1.0
    assert section["confusion"]["labels"] == ["a", "b"]
    (head,) = doc["headline"]["ab"]["questions"].values()
    assert head["figures"] == {"n": N, "accuracy": 1.0}


def test_a_kind_installed_as_a_plugin_runs_end_to_end(tmp_path: Path) -> None:
    """A real ``dreads`` finds the kind through its ``dreads.question_kinds`` entry point."""
    plugin = ab_plugin_path(tmp_path / "plugin")
    job = _job(tmp_path)
    path = os.pathsep.join([str(plugin), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {"PYTHONPATH": path}
    ran = dreads_process("run", str(job), "--upstream", "sim", "--db", "ab.db", cwd=tmp_path,
                         env=env, timeout=300)
    assert ran.code == 0, ran.stderr
    said = " ".join(ran.stdout.split())
    assert f"a/b accuracy 1 [1, 1] of {N}" in said, said  # answered, and reported, as its kind
