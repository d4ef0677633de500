"""End to end with the simulator: `dreads run --upstream sim` three times on
examples/tickets.jsonl, then
`dreads report A --against B --json`. Another seed with the same settings is no difference
beyond noise; joint reads with the simulator's joint interference
(DREADS_SIM_JOINT_INTERFERENCE) lose recall and AUC, found per question."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli_inprocess import dreads_in_process

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
QUESTIONS = ("refund", "churn")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs ``iso``, ``iso-seed`` (another seed) and ``joint`` (joint reads, interference)."""
    where = tmp_path_factory.mktemp("compare")
    for name in ("tickets.jsonl", "tickets.key.jsonl"):  # 300 tickets, two yes/no questions
        shutil.copy(EXAMPLES / name, where / name)
    for name, extra, env in (
        ("iso", [], {}),
        ("iso-seed", ["--seed", "13"], {}),
        ("joint", ["--mode", "joint"], {"DREADS_SIM_JOINT_INTERFERENCE": "0.6"}),
    ):
        done = dreads_in_process("run", "tickets.jsonl", "--upstream", "sim", "--run", name,
                                 "--json", *extra, cwd=where, env=env)
        assert done.code == 0, done.stderr
    return where


def _against(where: Path, a: str, b: str) -> dict[str, Any]:
    done = dreads_in_process("report", a, "--against", b, "--json", cwd=where)
    assert done.code == 0, done.stderr
    against: dict[str, Any] = json.loads(done.stdout)["against"]
    return against


def test_another_seed_is_no_difference_beyond_noise(runs: Path) -> None:
    cmp = _against(runs, "iso", "iso-seed")
    assert cmp["matched"] == 600 and cmp["only_a"] == cmp["only_b"] == 0
    assert cmp["settings"]["differ"] == [] and cmp["settings"]["seed_differs"]
    assert "noise check" in cmp["settings"]["note"]
    for qid in QUESTIONS:
        auc = cmp["questions"][qid]["overall"]["auc"]
        assert auc["verdict"]["real"] is False, auc["verdict"]["text"]
        assert auc["verdict"]["text"].startswith("no difference beyond noise: ΔAUC")
        assert auc["interval"]["low"] < 0 < auc["interval"]["high"]
        assert 0 < auc["detectable"] < 0.05  # the resolution of 300 items


def test_joint_interference_is_found_per_question(runs: Path) -> None:
    cmp = _against(runs, "iso", "joint")
    assert cmp["settings"]["differ"] == ["read_mode"]
    for qid in QUESTIONS:
        overall = cmp["questions"][qid]["overall"]
        for figure in ("recall", "auc"):
            pair = overall[figure]
            assert pair["verdict"]["real"] is True, pair["verdict"]["text"]
            assert pair["verdict"]["better"] == "iso" and pair["diff"] > 0
            assert pair["p_adjusted"] < 0.05 and pair["interval"]["low"] > 0
        assert overall["recall"]["a"] > 0.8 and overall["recall"]["b"] < 0.6
    lines = [v["text"] for v in cmp["verdicts"] if v["figure"] == "recall"]
    assert all(line.startswith("iso finds more of the yes's: Δrecall +") for line in lines)
