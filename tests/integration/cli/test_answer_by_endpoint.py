"""``dreads run --answer-by systemone|decisions``: a run answered by a decision endpoint (the
simulator's ``/v1/systemone`` and ``/v1/decisions``, served as vLLM 0.33 serves them, over
real HTTP), one request per decision, recorded as one draw per question; refusals, a 429
storm, a rate-limited and a concurrency-limited endpoint, a 401, an endpoint down mid-run and
a SIGKILLed run: every decision done exactly once, the failures counted as injected."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.fixtures.runs_cli import CliResult, sqlite_rows, write_jobs
from tests.fixtures.sim import MakeSim

Dreads = Callable[..., CliResult]
DREADS = str(Path(sys.executable).parent / "dreads")
MARK = "[decline]"


def decision_line(i: int, *, refuse: tuple[str, ...] = ()) -> str:
    """A decision of three questions (noul, choice, score); those named in ``refuse`` carry
    the simulator's refusal marker."""
    def text(qid: str, words: str) -> str:
        return f"{words} {MARK}" if qid in refuse else words

    return orjson.dumps({
        "id": f"d{i:03d}", "cell": f"c{i % 2}",
        "state": f"Clause {i}: the Supplier delivers within {10 + i} days.",
        "questions": {
            "late": {"type": "noul", "instructions": text("late", "Is delivery late?")},
            "who": {"type": "choice", "instructions": text("who", "Who bears the delay?"),
                    "criteria": {"supplier": "the party that delivers", "customer": None}},
            "risk": {"type": "score", "instructions": text("risk", "How risky?"),
                     "criteria": ["none", "low", "high"]},
        },
        "expected": {"late": "yes" if i % 3 == 0 else "no"},
    }).decode()


def jobs(tmp_path: Path, n: int, refuse: dict[int, tuple[str, ...]] | None = None) -> Path:
    refuse = refuse or {}
    return write_jobs(tmp_path / "jobs.jsonl",
                      [decision_line(i, refuse=refuse.get(i, ())) for i in range(n)])


def run(dreads: Dreads, path: Path, db: Path, *args: str) -> CliResult:
    return dreads("run", str(path), "--db", str(db), *args)


def answers(db: Path, run_name: str) -> dict[tuple[str, str], tuple[Any, ...]]:
    rows = sqlite_rows(db, "SELECT d.key, a.question_id, a.probs, a.label_mass, "
                       "a.argmax_is_label, a.endpoint_confidence, a.draws, a.stop_reason FROM "
                       "answers a JOIN decisions d ON d.id = a.decision_id JOIN runs r ON "
                       f"r.id = d.run_id WHERE r.name = '{run_name}'")
    return {(r[0], r[1]): (orjson.loads(r[2]) if isinstance(r[2], str) else r[2], *r[3:])
            for r in rows}


def outcomes(db: Path) -> dict[str, int]:
    return dict(sqlite_rows(db, "SELECT outcome, count(*) FROM attempts GROUP BY outcome"))


def test_systemone_run_is_vllm_reader_and_equals_dreads_first_draw(
        dreads: Dreads, make_sim: MakeSim, tmp_path: Path) -> None:
    sim = make_sim()
    path, db, n = jobs(tmp_path, 12), tmp_path / "s.db", 12
    by_endpoint = run(dreads, path, db, "--run", "s1", "--answer-by", "systemone",
                      "--answer-url", sim.url)
    assert by_endpoint.code == 0, by_endpoint.stderr
    assert f"decision endpoint {sim.url}" in by_endpoint.stderr
    assert sim.stats()["decisions"] == n  # one request per decision, all its questions
    by_reads = run(dreads, path, db, "--run", "r1", "--upstream", sim.url, "--draws", "1")
    assert by_reads.code == 0, by_reads.stderr
    mine, theirs = answers(db, "r1"), answers(db, "s1")
    assert mine.keys() == theirs.keys() and len(mine) == 3 * n
    for key, (probs, mass, is_label, confidence, draws, stop) in theirs.items():
        assert probs == pytest.approx(mine[key][0], abs=1e-9), key
        assert mass == pytest.approx(mine[key][1], abs=1e-9) and is_label == mine[key][2]
        assert confidence == pytest.approx(max(probs.values()) * mass, abs=1e-9)
        assert (draws, stop) == (1, "endpoint")
    assert mine[("d000", "late")][3] is None  # reads report no endpoint confidence
    draws = sqlite_rows(db, "SELECT count(*), sum(seed IS NULL), sum(label_logprobs IS NULL), "
                        "sum(argmax_id IS NULL), sum(label_mass IS NULL) FROM draws d JOIN "
                        "attempts a ON a.id = d.attempt_id JOIN runs r ON r.id = a.run_id "
                        "WHERE r.name = 's1'")
    assert draws == [(3 * n, 3 * n, 3 * n, 3 * n, 0)]
    usage = sqlite_rows(db, "SELECT usage FROM attempts a JOIN runs r ON r.id = a.run_id "
                        "WHERE r.name = 's1'")
    assert all(orjson.loads(u)["input_tokens"] > 0 for (u,) in usage)


def test_decisions_run_keeps_confidence_and_usage_and_no_label_mass(
        dreads: Dreads, make_sim: MakeSim, tmp_path: Path) -> None:
    sim = make_sim()
    path, db = jobs(tmp_path, 6), tmp_path / "o.db"
    result = run(dreads, path, db, "--answer-by", "decisions", "--answer-url", sim.url + "/v1",
                 "--json")
    assert result.code == 0, result.stderr
    assert result.json()["counts"] == {"done": 6}
    rows = answers(db, "jobs")
    assert len(rows) == 18
    for (_, qid), (probs, mass, is_label, confidence, _, _) in rows.items():
        assert mass is None and is_label is None  # /v1/decisions does not return them
        if qid == "late":  # a predicate's answer is its probability only
            assert confidence is None
        else:
            assert 0.0 < confidence <= max(probs.values()) + 1e-12
    report = dreads("report", "jobs", "--json", "--database-url", f"sqlite:///{db}").json()
    overall = report["diagnostics"]["overall"]
    assert overall["draw_rows"] == 18 and overall["mass_draws"] == 0
    assert overall["low_mass_share"] is None and overall["argmax_not_label_share"] is None
    exported = dreads("export", "jobs", "--database-url", f"sqlite:///{db}")
    record = orjson.loads(exported.stdout.splitlines()[0])
    assert record["answers"]["late"]["label_mass"] is None
    usage = sqlite_rows(db, "SELECT usage FROM attempts WHERE outcome = 'ok'")
    assert {tuple(sorted(orjson.loads(u))) for (u,) in usage} == {
        ("input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details",
         "total_tokens")}


def test_refusals_are_their_own_outcome_counted_per_cell(
        dreads: Dreads, make_sim: MakeSim, tmp_path: Path) -> None:
    sim = make_sim(refuse_marker=MARK)
    refuse = {1: ("who",), 2: ("late", "risk"), 4: ("late", "who", "risk"), 7: ("risk",)}
    path, db = jobs(tmp_path, 10, refuse), tmp_path / "f.db"
    result = run(dreads, path, db, "--answer-by", "systemone", "--answer-url", sim.url)
    assert result.code == 0, result.stderr
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("done", 10)]
    by_cell = dict(sqlite_rows(db, "SELECT d.cell, count(*) FROM attempts a JOIN decisions d "
                               "ON d.id = a.decision_id WHERE outcome = 'refused' "
                               "GROUP BY d.cell"))
    assert by_cell == {"c0": 2 + 3, "c1": 1 + 1}  # decisions 2, 4 | 1, 7
    assert sim.stats()["refused"] == 7
    assert sqlite_rows(db, "SELECT count(*) FROM answers")[0][0] == 30 - 7
    status = dreads("status", "jobs", "--json", "--database-url", f"sqlite:///{db}").json()
    cells = {c["cell"]: c for c in status["cells"]}
    assert cells["c0"]["failures"] == {"refused": 5} and cells["c0"]["unanswered"] == 5
    assert cells["c1"]["failures"] == {"refused": 2} and cells["c1"]["unanswered"] == 2
    assert outcomes(db) == {"ok": 10, "refused": 7}


def test_a_429_storm_is_waited_out_with_retry_after(
        dreads: Dreads, make_sim: MakeSim, tmp_path: Path) -> None:
    sim = make_sim()
    httpx.post(sim.url + "/sim/throttle", params={"seconds": 2, "retry_after": 0.5})
    path, db = jobs(tmp_path, 20), tmp_path / "t.db"
    started = time.monotonic()
    result = run(dreads, path, db, "--answer-by", "decisions", "--answer-url", sim.url)
    assert result.code == 0, result.stderr
    assert time.monotonic() - started >= 1.5  # nothing was answered during the storm
    stats = sim.stats()
    assert stats["throttled"] > 0 and stats["decisions_answered"] == 20
    assert outcomes(db) == {"ok": 20}  # every decision done once, no failed attempt


def test_the_budget_keeps_a_rate_limited_endpoint_inside_its_limits(
        dreads: Dreads, make_sim: MakeSim, tmp_path: Path) -> None:
    sim = make_sim(decision_rps=12, decision_max_concurrent=3)
    path, db = jobs(tmp_path, 24), tmp_path / "b.db"
    started = time.monotonic()
    result = run(dreads, path, db, "--answer-by", "systemone", "--answer-url", sim.url,
                 "--answer-rps", "10", "--answer-concurrency", "3")
    elapsed = time.monotonic() - started
    assert result.code == 0, result.stderr
    stats = sim.stats()
    assert stats["throttled"] == 0 and stats["decisions_answered"] == 24
    assert stats["decision_peak_in_flight"] <= 3
    assert elapsed >= 2.0  # 24 requests at 10/s
    settings = dreads("runs", "--json", "--database-url", f"sqlite:///{db}").json()[0]
    assert settings["settings"]["answer_rps"] == 10.0
    # without the budget the same endpoint throttles, and the run still ends exactly once
    unbudgeted = run(dreads, path, db, "--run", "nb", "--answer-by", "systemone",
                     "--answer-url", sim.url, "--answer-concurrency", "16")
    assert unbudgeted.code == 0, unbudgeted.stderr
    assert sim.stats()["throttled"] > 0
    assert outcomes(db) == {"ok": 48}


def test_a_refused_key_stops_the_run_and_fails_no_decision(
        dreads: Dreads, make_sim: MakeSim, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sim = make_sim(api_key="s3cret")
    path, db = jobs(tmp_path, 40), tmp_path / "k.db"
    args = ("--answer-by", "systemone", "--answer-url", sim.url, "--chunk-size", "4")
    refused = run(dreads, path, db, *args)
    assert refused.code == 2
    assert "refused a request without an API key (401" in refused.stderr
    assert "DREADS_ANSWER_API_KEY" in refused.stderr
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("pending", 40)]
    assert set(outcomes(db)) == {"unauthorized"}
    assert outcomes(db)["unauthorized"] < 40  # it stopped at the first refusals
    assert sqlite_rows(db, "SELECT max(attempts) FROM decisions") == [(0,)]  # uncharged
    monkeypatch.setenv("DREADS_ANSWER_API_KEY", "s3cret")
    elsewhere = run(dreads, path, db, *args)  # the key is DREADS_ANSWER_URL's only
    assert elsewhere.code == 2 and "DREADS_ANSWER_URL" in elsewhere.stderr
    monkeypatch.setenv("DREADS_ANSWER_URL", sim.url)
    again = run(dreads, path, db, *args)
    assert again.code == 0, again.stderr
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("done", 40)]
    stored = sqlite_rows(db, "SELECT settings FROM runs")[0][0]
    assert "s3cret" not in stored  # the key is never a run setting


def test_resume_refuses_to_switch_who_answers(dreads: Dreads, make_sim: MakeSim,
                                              tmp_path: Path) -> None:
    sim = make_sim()
    path, db = jobs(tmp_path, 3), tmp_path / "r.db"
    assert run(dreads, path, db, "--answer-by", "systemone", "--answer-url", sim.url).code == 0
    url = f"sqlite:///{db}"
    switched = dreads("resume", "jobs", "--answer-by", "decisions", "--database-url", url)
    assert switched.code == 2
    assert "(--answer-by systemone -> decisions)" in switched.stderr
    to_reads = run(dreads, path, db, "--answer-by", "reads")
    assert to_reads.code == 2 and "exists with other settings" in to_reads.stderr
    budget = dreads("resume", "jobs", "--answer-rps", "5", "--database-url", url)
    assert budget.code == 0, budget.stderr
    listed = dreads("runs", "--json", "--database-url", url).json()[0]
    assert listed["settings"]["answer_rps"] == 5.0


def _done(db: Path) -> int:
    try:
        return int(sqlite_rows(db, "SELECT count(*) FROM decisions WHERE status = 'done'")[0][0])
    except Exception:  # the schema is not there yet
        return 0


def _when_done(db: Path, at_least: int, action: Callable[[], None]) -> threading.Thread:
    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _done(db) < at_least:
            time.sleep(0.05)
        action()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


#: How long the endpoint is down mid-run: several of the client's longest backoffs (5 s).
OUTAGE_S = 8


@pytest.mark.slow
def test_an_endpoint_down_mid_run(dreads: Dreads, make_sim: MakeSim, tmp_path: Path) -> None:
    sim = make_sim(step_ms=20, max_batch=8)
    n = 120
    path, db = jobs(tmp_path, n), tmp_path / "down.db"
    outage = _when_done(db, n // 3, lambda: sim.down(OUTAGE_S))
    started = time.monotonic()
    result = run(dreads, path, db, "--answer-by", "systemone", "--answer-url", sim.url)
    outage.join(timeout=1)
    assert result.code == 0, result.stderr
    assert time.monotonic() - started >= OUTAGE_S
    assert sim.stats()["down_503"] > 0
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("done", n)]
    assert outcomes(db) == {"ok": n}  # the outage was waited out: no attempt failed
    per_decision = sqlite_rows(db, "SELECT count(*) FROM answers GROUP BY decision_id")
    assert len(per_decision) == n and {c for (c,) in per_decision} == {3}


@pytest.mark.slow
def test_a_killed_endpoint_run_resumes_exactly_once(make_sim: MakeSim, tmp_path: Path) -> None:
    sim = make_sim(step_ms=30, max_batch=4, refuse_marker=MARK)
    n = 150
    refuse = {i: ("who",) for i in range(0, n, 10)}
    path, db = jobs(tmp_path, n, refuse), tmp_path / "kill.db"
    env = {**os.environ, "DREADS_MODEL": "dgemma", "DREADS_TOKENIZER": "standin"}
    args = [DREADS, "run", str(path), "--db", str(db), "--answer-by", "systemone",
            "--answer-url", sim.url, "--chunk-size", "8"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while _done(db) < 30 and time.monotonic() < deadline:
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert _done(db) < n
    rerun = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("done", n)]
    assert sqlite_rows(db, "SELECT count(*) FROM attempts WHERE outcome = 'ok' AND won") == [
        (n,)]
    assert sqlite_rows(db, "SELECT count(*) FROM attempts WHERE outcome = 'refused'") == [
        (len(refuse),)]
    assert sqlite_rows(db, "SELECT count(*) FROM answers") == [(3 * n - len(refuse),)]


def test_readme_second_opinion_on_one_pod(dreads: Dreads, make_sim: MakeSim, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The workflow of docs/reads.md ("Who answers"): dreads' reads and vLLM's own reader on
    the same server, then ``report --against`` says where they disagree and by how much."""
    sim = make_sim()
    monkeypatch.setenv("DREADS_UPSTREAM", sim.url)
    path, n = jobs(tmp_path, 20), 20
    monkeypatch.chdir(tmp_path)  # the default --db dreads.db, as in docs/reads.md
    assert dreads("run", str(path), "--run", "reads").code == 0
    second = dreads("run", str(path), "--run", "vllm-reader", "--answer-by", "systemone")
    assert second.code == 0, second.stderr
    report = dreads("report", "reads", "--against", "vllm-reader", "--json",
                    "--database-url", "sqlite:///dreads.db")
    assert report.code == 0, report.stderr
    dis = report.json()["against"]["disagreement"]
    assert dis["overall"]["both_answered"] == 3 * n
    assert set(dis["cells"]) == {"c0", "c1"}
    assert dis["overall"]["mean_distance"] > 0  # multi-draw means against one draw
    distances = [row["distance"] for row in dis["largest"]]
    assert distances == sorted(distances, reverse=True) and len(distances) == 10
    text = dreads("report", "reads", "--against", "vllm-reader",
                  "--database-url", "sqlite:///dreads.db")
    assert "where a and b disagree" in text.stdout and "furthest apart" in text.stdout
