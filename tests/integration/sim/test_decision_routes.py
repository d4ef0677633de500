"""The simulator's ``POST /v1/systemone`` and ``POST /v1/decisions``, served as vLLM 0.33 serves
them: one read per question and one draw, laid out as vLLM's reader lays it out. So the answer
vLLM's route gives equals dreads' own first draw on the same server (``--draws 1``), which is
the check a user runs on a real pod."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.engine import PolicyName, ReadMode, ReadSettings, parse_decision
from app.runs.answer import answer_decision
from app.tokenizer.hf import HFTextTokenizer
from app.upstream.vllm import VllmUpstream
from tests.fixtures.sim import MakeSim

STATE = "Clause 4.2: the Supplier delivers within 30 days. Clause 9.1: delivery takes 45 days."
QUESTIONS: dict[str, Any] = {
    "conflict": {"type": "noul", "instructions": "Do the two clauses contradict each other?"},
    "who": {"type": "choice", "instructions": "Who bears the delay?",
            "criteria": {"supplier": "the party that delivers", "customer": None}},
    "risk": {"type": "score", "instructions": "How risky is it?",
             "criteria": ["none", "low", "some", "high", "severe"]},
}


def _post(url: str, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(url + path, json=body, headers=headers, timeout=30)


async def _dreads_first_draw(url: str, tok: HFTextTokenizer, joint: bool) -> dict[str, Any]:
    settings = ReadSettings(model="dgemma", tokenizer=tok.name, policy=PolicyName.FIXED,
                            fixed_draws=1,
                            read_mode=ReadMode.JOINT if joint else ReadMode.ISOLATED)
    upstream = VllmUpstream(url, model="dgemma", canvas_length=320)
    decision = parse_decision({"id": "d", "state": STATE, "questions": QUESTIONS})
    try:
        decided = await answer_decision(decision, settings, tok, upstream)
    finally:
        await upstream.aclose()
    return {a.question_id: a for a in decided.answers}


@pytest.mark.parametrize("joint", [False, True])
@pytest.mark.parametrize("tokenizer_fixture", ["standin_tokenizer", "approx_tokenizer"])
def test_systemone_equals_dreads_first_draw(make_sim: MakeSim, request: pytest.FixtureRequest,
                                            tokenizer_fixture: str, joint: bool) -> None:
    tok: HFTextTokenizer = request.getfixturevalue(tokenizer_fixture)
    sim = make_sim(tokenizer=tok.name)
    response = _post(sim.url, "/v1/systemone",
                     {"model": "dgemma", "state": STATE, "questions": QUESTIONS, "joint": joint})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "structured_decision" and body["id"].startswith("decision-")
    ours = asyncio.run(_dreads_first_draw(sim.url, tok, joint))
    answers, diagnostics = body["answers"], body["diagnostics"]
    assert answers["conflict"]["noul"] == pytest.approx(ours["conflict"].p_yes, abs=1e-12)
    assert answers["who"]["probabilities"] == pytest.approx(
        {"supplier": ours["who"].probs["A"], "customer": ours["who"].probs["B"]}, abs=1e-12)
    assert answers["who"]["choice"] == ours["who"].option
    assert answers["risk"]["score"] == pytest.approx(ours["risk"].expected_level, abs=1e-12)
    assert answers["risk"]["legend"] == {"0": "none", "1": "low", "2": "some", "3": "high",
                                         "4": "severe"}
    for qid, answer in ours.items():
        assert diagnostics[qid]["label_mass"] == pytest.approx(answer.label_mass, abs=1e-12)
        assert diagnostics[qid]["argmax_is_label"] is answer.argmax_is_label
        top = max(answer.probs.values())
        assert answers[qid]["confidence"] == pytest.approx(top * answer.label_mass, abs=1e-12)
    if joint:
        (canvas,) = body["joint"]["canvases"]
        assert canvas["questions"] == list(QUESTIONS) and canvas["width"] == 16
    else:
        assert body["joint"] is None
    assert body["usage"]["input_tokens"] > 0 and body["usage"]["output_tokens"] > 0


def test_decisions_answers_in_openais_shape(make_sim: MakeSim) -> None:
    sim = make_sim()
    body = {"model": "dgemma", "input": [{"role": "user", "content": STATE}], "questions": [
        {"type": "predicate", "name": "conflict", "instructions": "Do they contradict?"},
        {"type": "choice", "instructions": "Which value?",
         "choices": [{"value": True}, {"value": "true", "description": "the text"}]},
        {"type": "score", "name": "risk", "instructions": "How risky?",
         "levels": [{"label": "low"}, {"label": "mid"}, {"label": "high"}]}]}
    response = _post(sim.url, "/v1/decisions", body)
    assert response.status_code == 200, response.text
    out = response.json()
    assert set(out) == {"model", "answers", "usage"}
    predicate, choice, score = out["answers"]
    assert (predicate["type"], predicate["name"]) == ("predicate", "conflict")
    assert 0.0 <= predicate["probability"] <= 1.0
    assert [p["value"] for p in choice["probabilities"]] == [True, "true"]
    assert choice["choice"] in (True, "true") and choice["name"] is None
    assert sum(p["probability"] for p in choice["probabilities"]) == pytest.approx(1.0)
    assert [(p["value"], p["label"]) for p in score["probabilities"]] == [
        (0, "low"), (1, "mid"), (2, "high")]
    usage = out["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert set(usage["input_tokens_details"]) == {"cached_tokens", "cache_write_tokens"}


def test_decision_routes_refuse_as_vllm_does(make_sim: MakeSim) -> None:
    sim = make_sim(api_key="k3y")
    auth = {"Authorization": "Bearer k3y"}
    ok = {"model": "dgemma", "state": STATE, "questions": {"q": QUESTIONS["conflict"]}}
    assert _post(sim.url, "/v1/systemone", ok).status_code == 401
    assert _post(sim.url, "/v1/systemone", ok, **auth).status_code == 200
    unknown = _post(sim.url, "/v1/systemone", {**ok, "model": "other"}, **auth)
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
    levels = {"type": "score", "instructions": "?", "criteria": [str(i) for i in range(11)]}
    refused = _post(sim.url, "/v1/systemone", {**ok, "questions": {"s": levels}}, **auth)
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "message": "question 's': at most 10 options for this model",
        "type": "BadRequestError", "param": None, "code": 400}
    malformed = _post(sim.url, "/v1/systemone", {**ok, "extra": 1}, **auth)
    assert malformed.status_code == 400
    assert malformed.json()["error"]["type"] == "Bad Request"
    many = {"model": "dgemma", "input": "x", "questions": [{
        "type": "choice", "instructions": "?", "choices": [{"value": f"v{i}"} for i in range(27)]}]}
    too_many = _post(sim.url, "/v1/decisions", many, **auth)
    assert too_many.status_code == 400
    assert too_many.json()["error"]["message"] == \
        "This model supports at most 26 choices per question"


def test_systemone_answers_follow_the_answer_key(make_sim: MakeSim, tmp_path: Path,
                                                approx_tokenizer: HFTextTokenizer) -> None:
    """The key holds dreads' labels (a score's "4" is its fourth level); vLLM's reader labels
    levels 0-indexed, and the simulator answers the keyed level either way."""
    key = tmp_path / "key.jsonl"
    key.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in [
        {"state": STATE, "question": QUESTIONS["conflict"]["instructions"], "label": "yes"},
        {"state": STATE, "question": QUESTIONS["risk"]["instructions"], "label": "4"},
        {"state": STATE, "question": QUESTIONS["who"]["instructions"], "label": "B"}]))
    sim = make_sim(tokenizer=approx_tokenizer.name, key_path=str(key), separation=6.0,
                   noise=0.1)
    out = _post(sim.url, "/v1/systemone",
                {"state": STATE, "questions": QUESTIONS}).json()
    assert out["answers"]["conflict"]["noul"] > 0.95
    assert out["answers"]["who"]["choice"] == "customer"
    assert out["answers"]["risk"]["probabilities"]["3"] > 0.95
    assert all(d["argmax_is_label"] and d["label_mass"] > 0.85
               for d in out["diagnostics"].values())
