"""The shipped example files: reproducible from the generator, valid job lines, keys complete."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from app.engine import parse_decision

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GENERATOR = EXAMPLES / "make_contracts.py"
JOB_FILES = ("contracts", "choice", "score", "small", "batch_style", "decisions")
SHIPPED = tuple(f"{stem}{ext}" for stem in JOB_FILES for ext in (".jsonl", ".key.jsonl"))


def _generate(out: Path, *seed: str) -> None:
    subprocess.run([sys.executable, str(GENERATOR), "--out", str(out), *seed], check=True,
                   capture_output=True, timeout=120)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _state_key(state: Any) -> str:
    return json.dumps(state, sort_keys=True, ensure_ascii=False)


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("examples")
    _generate(out)
    return out


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_file_is_what_the_generator_writes(regenerated: Path, name: str) -> None:
    shipped = (EXAMPLES / name).read_bytes()
    assert shipped == (regenerated / name).read_bytes(), (
        f"examples/{name} differs from the generator's output: "
        "run `python examples/make_contracts.py` and commit the result"
    )


def test_generator_is_deterministic_in_its_seed(tmp_path: Path) -> None:
    _generate(tmp_path / "a", "--seed", "5")
    _generate(tmp_path / "b", "--seed", "5")
    a, b = (tmp_path / d / "contracts.jsonl" for d in "ab")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != (EXAMPLES / "contracts.jsonl").read_bytes()


def test_readme_records_the_seed() -> None:
    from_source = next(line for line in GENERATOR.read_text().splitlines()
                       if line.startswith("DEFAULT_SEED"))
    seed = from_source.split("=")[1].strip()
    assert f"--seed {seed}" in (EXAMPLES / "README.md").read_text()


@pytest.mark.parametrize("stem", JOB_FILES)
def test_every_line_is_a_valid_decision(stem: str) -> None:
    decisions = [parse_decision(obj, line_no=i) for i, obj in
                 enumerate(_lines(EXAMPLES / f"{stem}.jsonl"), start=1)]
    assert len({d.id for d in decisions}) == len(decisions), "decision ids must be unique"
    assert all(d.expected.keys() == {q.id for q in d.questions} for d in decisions)


@pytest.mark.parametrize("stem", JOB_FILES)
def test_key_covers_every_state_and_question(stem: str) -> None:
    key = {(_state_key(k["state"]), k["question"]): k["label"]
           for k in _lines(EXAMPLES / f"{stem}.key.jsonl")}
    for i, obj in enumerate(_lines(EXAMPLES / f"{stem}.jsonl"), start=1):
        decision = parse_decision(obj, line_no=i)
        for q in decision.questions:
            label = key[(_state_key(decision.state), q.instructions)]
            assert label in q.labels
            assert label == decision.expected[q.id], f"{decision.id} {q.id}"


def test_contracts_look_like_the_field_report() -> None:
    decisions = [parse_decision(obj) for obj in _lines(EXAMPLES / "contracts.jsonl")]
    positives = [d for d in decisions if d.expected["conflict"] == "yes"]
    assert 1000 <= len(decisions) <= 2000
    assert len(positives) >= 20
    assert 0.01 <= len(positives) / len(decisions) <= 0.03
    cells = Counter(d.cell for d in decisions)
    assert len(cells) >= 12, "contracts x wordings"
    assert all(str(d.state).count("Clause ") == 2 for d in decisions)


@pytest.mark.parametrize(("stem", "qtype"), [("choice", "choice"), ("score", "score")])
def test_choice_and_score_examples_have_50_to_200_decisions(stem: str, qtype: str) -> None:
    decisions = [parse_decision(obj) for obj in _lines(EXAMPLES / f"{stem}.jsonl")]
    assert 50 <= len(decisions) <= 200
    assert {q.type for d in decisions for q in d.questions} == {qtype}
    assert len({d.expected[d.questions[0].id] for d in decisions}) >= 4, "answers vary"


def test_small_mixes_every_question_type() -> None:
    decisions = [parse_decision(obj) for obj in _lines(EXAMPLES / "small.jsonl")]
    assert len(decisions) == 5
    assert {q.type for d in decisions for q in d.questions} == {"noul", "choice", "score"}
    assert any(not isinstance(d.state, str) for d in decisions), "a JSON state"


def test_batch_style_lines_are_openai_batch_requests() -> None:
    lines = _lines(EXAMPLES / "batch_style.jsonl")
    assert lines and all(line.keys() >= {"custom_id", "method", "url", "body"} for line in lines)
    assert {line["url"] for line in lines} == {"/v1/systemone"}


@pytest.mark.parametrize("stem", (*JOB_FILES, "images"))
def test_key_read_against_its_job_file_warns_of_nothing(stem: str) -> None:
    from app.sim.key import AnswerKey

    key = AnswerKey.load(EXAMPLES / f"{stem}.key.jsonl")
    assert key.job_file == EXAMPLES / f"{stem}.jsonl" and key.warnings == ()
