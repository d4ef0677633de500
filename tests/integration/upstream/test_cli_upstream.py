"""``dreads check-upstream`` and ``dreads decide`` against a simulator on a free port."""

from __future__ import annotations

import socket
from pathlib import Path

import orjson
from typer.testing import CliRunner

from app.cli import app
from app.cli.decide import decide_all, load_decisions
from app.engine import ReadSettings
from app.tokenizer.hf import HFTextTokenizer
from app.upstream.vllm import VllmUpstream
from tests.fixtures.sim import MakeSim
from tests.integration.upstream.conftest import NOUL, decision_obj

runner = CliRunner()


def test_check_upstream_prints_ready_and_the_fingerprint(make_sim: MakeSim) -> None:
    sim = make_sim(canvas_length=320, max_model_len=4096)
    result = runner.invoke(app, ["check-upstream", sim.url, "--timeout", "10"],
                           env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    for needle in ("ready", "SIMULATOR", "dgemma", "4096", "320", "read latency"):
        assert needle in result.output


def test_check_upstream_json(make_sim: MakeSim) -> None:
    sim = make_sim()
    result = runner.invoke(app, ["check-upstream", sim.url, "--json"])
    assert result.exit_code == 0, result.output
    payload = orjson.loads(result.stdout)
    assert payload["ready"] is True
    assert payload["fingerprint"]["engine"] == "sim"
    assert payload["read_latency_ms"] > 0


def test_check_upstream_not_ready_exits_1_saying_what_to_check() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        result = runner.invoke(app, ["check-upstream", url, "--timeout", "1"])
    finally:
        sock.close()
    assert result.exit_code == 1
    assert "not ready" in result.output
    assert "check:" in result.output


def test_decide_one_question_prints_answer_mass_draws_and_stop(make_sim: MakeSim) -> None:
    sim = make_sim()
    result = runner.invoke(app, [
        "decide", "--state", "Clause 1: pay. Clause 2: never pay.",
        "--question", "Do the clauses conflict?", "--upstream", sim.url],
        env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    for needle in ("mass", "draws", "stop", "SIMULATOR"):
        assert needle in result.output
    assert any(reason in result.output for reason in ("near_certain", "agreed", "max_draws"))


def test_decide_file_json_reports_bad_lines_by_number(make_sim: MakeSim, tmp_path: Path) -> None:
    sim = make_sim()
    jobs = tmp_path / "jobs.jsonl"
    choice = {"type": "choice", "instructions": "Who pays?",
              "criteria": {"tenant": None, "landlord": None}}
    jobs.write_text("\n".join([
        orjson.dumps(decision_obj(1)).decode(),
        "{not json",
        orjson.dumps({"id": "x", "state": "s", "questions": {"q": {"type": "bogus"}}}).decode(),
        orjson.dumps(decision_obj(2, k=choice)).decode(),
    ]) + "\n")
    result = runner.invoke(app, ["decide", str(jobs), "--upstream", sim.url, "--json"])
    assert result.exit_code == 2, result.output  # bad lines make it a user error
    decisions = orjson.loads(result.stdout)["decisions"]
    assert [d["status"] for d in decisions] == ["done", "bad_line", "bad_line", "done"]
    assert [d["line"] for d in decisions if d["status"] == "bad_line"] == [2, 3]
    assert "line 2" in decisions[1]["error"]
    (answer,) = decisions[3]["answers"]
    assert answer["option"] in ("tenant", "landlord")
    assert {"label_mass", "draws", "stop_reason", "argmax_is_label"} <= set(answer)


def test_decide_fixed_policy_draws_n(make_sim: MakeSim) -> None:
    sim = make_sim()
    result = runner.invoke(app, ["decide", "--state", "s", "--question", "q?", "--draws", "3",
                                 "--upstream", sim.url, "--json"])
    assert result.exit_code == 0, result.output
    (answer,) = orjson.loads(result.stdout)["decisions"][0]["answers"]
    assert (answer["draws"], answer["stop_reason"]) == (3, "fixed")


def test_decide_unreachable_upstream_exits_1() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        result = runner.invoke(app, ["decide", "--state", "s", "--question", "q?",
                                     "--upstream", url, "--timeout", "1"])
    finally:
        sock.close()
    assert result.exit_code == 1
    assert "not ready" in result.output


async def test_a_template_that_does_not_fit_is_rejected_with_the_reason(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim()
    upstream = VllmUpstream(sim.url, model="dgemma", canvas_length=320)
    items = load_decisions([orjson.dumps(decision_obj(0, c=NOUL)).decode()])
    (outcome,) = await decide_all(items, ReadSettings(canvas_length=2), standin_tokenizer,
                                  upstream)
    await upstream.aclose()
    assert outcome.status == "rejected"
    assert outcome.error is not None and "canvas" in outcome.error
    assert sim.stats()["requests"] == 0
