"""What the simulator answers: vLLM's shapes, determinism, noise, prefix cache, answer key."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson

from app.engine import Endpoint, Layout, ReadMode, ReadSettings, parse_decision, plan_decision
from app.engine.wire import build_request, parse_response
from app.tokenizer.hf import HFTextTokenizer
from tests.unit.sim.conftest import DECISION, AsgiClient, read_body

CHAT = "/v1/chat/completions"
SLOT = 3  # dreads' document-first canvas "q0: <slot>": position 3


def _slot_logprobs(answer: dict[str, Any], position: int = SLOT) -> dict[str, float]:
    entry = answer["choices"][0]["logprobs"]["content"][position]
    return {t["token"]: t["logprob"] for t in entry["top_logprobs"]}


def _p_yes(answer: dict[str, Any], tokenizer: HFTextTokenizer) -> float:
    lp = _slot_logprobs(answer)
    yes, no = (f"token_id:{tokenizer.encode(w)[0]}" for w in (" yes", " no"))
    return 1.0 / (1.0 + math.exp(lp[no] - lp[yes]))


async def test_chat_answer_has_one_row_per_position_in_vllms_shape(
        asgi_client: AsgiClient, body: dict[str, Any],
        standin_tokenizer: HFTextTokenizer) -> None:
    answer = (await asgi_client().post(CHAT, json=body)).json()
    content = answer["choices"][0]["logprobs"]["content"]
    assert len(content) == min(body["max_tokens"], body["vllm_xargs"]["diffusion_canvas_length"])
    entry = content[SLOT]
    assert entry["token"].startswith("token_id:")
    assert "tool_calls" not in answer["choices"][0]["message"]
    argmax = int(entry["token"].removeprefix("token_id:"))
    assert entry["bytes"] == list(standin_tokenizer.hf.decode([argmax]).encode())
    for top in entry["top_logprobs"]:  # vLLM: the bytes of the token's own text
        assert top["bytes"] == list(top["token"].encode())
    tokens = {t["token"] for t in entry["top_logprobs"]}
    assert entry["token"] in tokens
    assert {f"token_id:{i}" for i in body["logprob_token_ids"]} <= tokens
    usage = answer["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens"] == len(content)
    # dreads' own parser reads it
    result = parse_response(Endpoint.CHAT, answer, [SLOT])
    assert set(result.rows[SLOT].logprobs) >= set(body["logprob_token_ids"])


async def test_non_slot_positions_emit_the_template_token(
        asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    answer = (await asgi_client().post(CHAT, json=body)).json()
    canvas = body["vllm_xargs"]["diffusion_seed_canvas"]
    content = answer["choices"][0]["logprobs"]["content"]
    for position, entry in enumerate(content):
        if position != SLOT:
            assert entry["token"] == f"token_id:{canvas[position]}"
            assert entry["logprob"] > -0.1


async def test_completions_endpoint_answers_the_same_question(
        asgi_client: AsgiClient, standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings(endpoint=Endpoint.COMPLETIONS)
    plan = plan_decision(parse_decision(DECISION), settings, standin_tokenizer)
    request = build_request(plan.units[0], settings, draw=0, seed=1,
                            vocab_size=standin_tokenizer.info.vocab_size)
    response = await asgi_client().post("/v1/completions", json=dict(request.body))
    assert response.status_code == 200, response.text
    logprobs = response.json()["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["top_logprobs"]) == len(
        logprobs["token_logprobs"])
    result = parse_response(Endpoint.COMPLETIONS, response.json(), request.slots)
    assert set(result.rows[request.slots[0]].logprobs) >= set(request.logprob_ids)


async def test_same_body_same_logprobs_and_noise_moves_them(
        asgi_client: AsgiClient, standin_tokenizer: HFTextTokenizer) -> None:
    client = asgi_client()
    first = (await client.post(CHAT, json=read_body(standin_tokenizer, seed=1))).json()
    again = (await asgi_client().post(CHAT, json=read_body(standin_tokenizer, seed=1))).json()
    other = (await client.post(CHAT, json=read_body(standin_tokenizer, seed=2))).json()
    assert _slot_logprobs(first) == _slot_logprobs(again)
    assert _slot_logprobs(first) != _slot_logprobs(other)


async def test_no_noise_means_identical_draws(
        asgi_client: AsgiClient, standin_tokenizer: HFTextTokenizer) -> None:
    client = asgi_client(noise=0.0)
    a = (await client.post(CHAT, json=read_body(standin_tokenizer, seed=1))).json()
    b = (await client.post(CHAT, json=read_body(standin_tokenizer, seed=2))).json()
    assert _slot_logprobs(a) == _slot_logprobs(b)


async def test_cached_tokens_reported_for_a_repeated_prefix(
        asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    client = asgi_client()
    first = (await client.post(CHAT, json=body)).json()["usage"]
    second = (await client.post(CHAT, json=body)).json()["usage"]
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0
    assert cached % 16 == 0
    assert cached >= second["prompt_tokens"] - 16


def _key(tmp_path: Path, label: str) -> str:
    path = tmp_path / f"key-{label}.jsonl"
    line = {"state": DECISION["state"],
            "question": DECISION["questions"]["conflict"]["instructions"], "label": label}
    path.write_bytes(orjson.dumps(line) + b"\n")
    return str(path)


async def test_the_answer_key_moves_answers(
        asgi_client: AsgiClient, body: dict[str, Any], standin_tokenizer: HFTextTokenizer,
        tmp_path: Path) -> None:
    yes = asgi_client(key_path=_key(tmp_path, "yes"), separation=6.0, noise=0.1)
    no = asgi_client(key_path=_key(tmp_path, "no"), separation=6.0, noise=0.1)
    p_yes = _p_yes((await yes.post(CHAT, json=body)).json(), standin_tokenizer)
    p_no = _p_yes((await no.post(CHAT, json=body)).json(), standin_tokenizer)
    assert p_yes > 0.95
    assert p_no < 0.05


async def test_the_answer_key_works_through_the_completions_endpoint(
        asgi_client: AsgiClient, standin_tokenizer: HFTextTokenizer, tmp_path: Path) -> None:
    settings = ReadSettings(endpoint=Endpoint.COMPLETIONS)  # the vllm layout: bare yes / no
    plan = plan_decision(parse_decision(DECISION), settings, standin_tokenizer)
    request = build_request(plan.units[0], settings, draw=0, seed=1,
                            vocab_size=standin_tokenizer.info.vocab_size)
    yes, no = (f"token_id:{standin_tokenizer.encode(w)[0]}" for w in ("yes", "no"))
    for label, check in (("yes", lambda d: d > 3), ("no", lambda d: d < -3)):
        client = asgi_client(key_path=_key(tmp_path, label), separation=6.0, noise=0.1)
        answer = (await client.post("/v1/completions", json=dict(request.body))).json()
        row = answer["choices"][0]["logprobs"]["top_logprobs"][request.slots[0]]
        assert check(row[yes] - row[no]), label


async def test_miscalibration_moves_probabilities_but_keeps_the_ranking(
        asgi_client: AsgiClient, standin_tokenizer: HFTextTokenizer, tmp_path: Path) -> None:
    instructions = DECISION["questions"]["conflict"]["instructions"]
    states = [f"Clause {i}: the tenant pays {i} euros." for i in range(12)]
    key = tmp_path / "key.jsonl"
    key.write_bytes(b"".join(orjson.dumps({"state": s, "question": instructions,
                                           "label": "yes" if i % 2 else "no"}) + b"\n"
                             for i, s in enumerate(states)))
    bodies = [read_body(standin_tokenizer, decision={**DECISION, "state": s}) for s in states]
    plain, skewed = asgi_client(key_path=str(key)), asgi_client(key_path=str(key),
                                                               miscalibration=1.0)
    p_plain = [_p_yes((await plain.post(CHAT, json=b)).json(), standin_tokenizer)
               for b in bodies]
    p_skewed = [_p_yes((await skewed.post(CHAT, json=b)).json(), standin_tokenizer)
                for b in bodies]

    def order(ps: list[float]) -> list[int]:
        return sorted(range(len(ps)), key=ps.__getitem__)

    assert order(p_plain) == order(p_skewed)
    assert max(abs(a - b) for a, b in zip(p_plain, p_skewed, strict=True)) > 0.1


async def test_low_mass_read_has_a_non_label_argmax(
        asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    answer = (await asgi_client(low_mass_rate=1.0).post(CHAT, json=body)).json()
    entry = answer["choices"][0]["logprobs"]["content"][SLOT]
    labels = {f"token_id:{i}" for i in body["logprob_token_ids"]}
    assert entry["token"] not in labels
    mass = sum(math.exp(t["logprob"]) for t in entry["top_logprobs"] if t["token"] in labels)
    assert mass < 0.2


async def test_malformed_read_lacks_one_label_on_first_delivery_only(
        asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    client = asgi_client(malformed_rate=1.0)
    labels = {f"token_id:{i}" for i in body["logprob_token_ids"]}
    first = _slot_logprobs((await client.post(CHAT, json=body)).json())
    second = _slot_logprobs((await client.post(CHAT, json=body)).json())
    assert not labels <= set(first)
    assert labels <= set(second)
    assert (await client.get("/sim/stats")).json()["faults"]["malformed"] == 1


async def test_models_version_and_health(asgi_client: AsgiClient) -> None:
    client = asgi_client(model="dg", canvas_length=160, max_model_len=4096)
    models = (await client.get("/v1/models")).json()
    assert models["object"] == "list"
    entry = models["data"][0]
    assert (entry["id"], entry["max_model_len"]) == ("dg", 4096)
    assert "canvas_length" not in entry  # vLLM does not report it: only a full-width read does
    assert (await client.get("/version")).json()["version"].startswith("dreads-sim ")
    health = await client.get("/health")
    assert (health.status_code, health.content) == (200, b"")


async def test_down_answers_503_until_up(asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    client = asgi_client()
    await client.post("/sim/down", params={"seconds": 60})
    assert (await client.get("/v1/models")).status_code == 503
    assert (await client.post(CHAT, json=body)).status_code == 503
    await client.post("/sim/up")
    assert (await client.post(CHAT, json=body)).status_code == 200


async def test_joint_interference_weakens_joint_reads_only(
        asgi_client: AsgiClient, standin_tokenizer: HFTextTokenizer, tmp_path: Path) -> None:
    """Two yes questions on one canvas (a joint read) answer less yes with the knob; the same
    question read alone answers as without it."""
    questions = {"a": {"type": "noul", "instructions": "Is the rent due monthly?"},
                 "b": {"type": "noul", "instructions": "Is there a deposit?"}}
    decision = {**DECISION, "questions": questions}
    key = tmp_path / "key.jsonl"
    key.write_bytes(b"".join(orjson.dumps({"state": DECISION["state"], "question":
                                           q["instructions"], "label": "yes"}) + b"\n"
                             for q in questions.values()))
    settings = ReadSettings(read_mode=ReadMode.JOINT, layout=Layout.DOCUMENT_FIRST)
    plan = plan_decision(parse_decision(decision), settings, standin_tokenizer)
    request = build_request(plan.units[0], settings, draw=0, seed=1,
                            vocab_size=standin_tokenizer.info.vocab_size)
    slots = request.slots
    assert len(slots) == 2  # one canvas asks both questions
    alone = read_body(standin_tokenizer, decision={**DECISION, "questions": {"a": questions["a"]}})
    plain = asgi_client(key_path=str(key), separation=3.0, noise=0.1)
    knob = asgi_client(key_path=str(key), separation=3.0, noise=0.1, joint_interference=0.6)
    for position in slots:
        p_plain = _p_yes_at((await plain.post(CHAT, json=dict(request.body))).json(),
                            standin_tokenizer, position)
        p_knob = _p_yes_at((await knob.post(CHAT, json=dict(request.body))).json(),
                           standin_tokenizer, position)
        assert p_plain > 0.8 and p_knob < p_plain - 0.3
    assert (_p_yes((await plain.post(CHAT, json=alone)).json(), standin_tokenizer)
            == _p_yes((await knob.post(CHAT, json=alone)).json(), standin_tokenizer))


def _p_yes_at(answer: dict[str, Any], tokenizer: HFTextTokenizer, position: int) -> float:
    lp = _slot_logprobs(answer, position)
    yes, no = (f"token_id:{tokenizer.encode(w)[0]}" for w in (" yes", " no"))
    return 1.0 / (1.0 + math.exp(lp[no] - lp[yes]))
