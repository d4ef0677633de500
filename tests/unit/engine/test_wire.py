"""Noise seeds, request bodies (both endpoints), deterministic encoding, response parsing."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.engine import (
    FORBIDDEN_FIELDS,
    Endpoint,
    Layout,
    ReadSettings,
    ReadUnit,
    build_request,
    derive_seed,
    encode_body,
    parse_decision,
    parse_response,
    plan_decision,
    seed_canvas,
)
from app.errors import MalformedResponse
from app.tokenizer.hf import HFTextTokenizer

VOCAB = 800


def unit_for(tok: HFTextTokenizer, settings: ReadSettings, state: Any = "Der Himmel ist blau ✓",
             questions: dict[str, Any] | None = None) -> ReadUnit:
    qs = questions or {"n": {"type": "noul", "instructions": "Blau?"}}
    return plan_decision(parse_decision({"id": "d", "state": state, "questions": qs}),
                         settings, tok).units[0]


@pytest.mark.parametrize("change", [(1, 0, "d", "q", 0), (0, 1, "d", "q", 0),
                                    (0, 0, "e", "q", 0), (0, 0, "d", "r", 0),
                                    (0, 0, "d", "q", 1)])
def test_derive_seed_depends_on_every_argument(change: tuple[Any, ...]) -> None:
    base = derive_seed(0, 0, "d", "q", 0)
    assert derive_seed(0, 0, "d", "q", 0) == base
    assert derive_seed(*change) != base
    assert 0 <= derive_seed(*change) < 2**63


def test_derive_seed_is_stable_across_processes() -> None:
    # A resumed run on another machine must send the same canvas.
    assert derive_seed(7, 0, "X3|C1|conflict", "conflict", 2) == 3736526920486761459


def test_seed_canvas_overwrites_only_slots() -> None:
    template = list(range(100, 116))
    canvas = seed_canvas(template, [3, 9], seed=12345, vocab_size=50)
    assert [c for i, c in enumerate(canvas) if i not in (3, 9)] == \
        [t for i, t in enumerate(template) if i not in (3, 9)]
    assert all(0 <= canvas[p] < 50 for p in (3, 9))
    assert canvas == seed_canvas(template, [3, 9], seed=12345, vocab_size=50)
    draws = {seed_canvas(template, [3], seed=s, vocab_size=50)[3] for s in range(40)}
    assert len(draws) > 10


def test_chat_body_matches_the_protocol(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings(model="dgemma-26b", layout=Layout.DOCUMENT_FIRST)
    unit = unit_for(standin_tokenizer, settings)
    req = build_request(unit, settings, draw=0, seed=99, vocab_size=VOCAB)
    body = dict(req.body)
    assert set(body) == {"model", "messages", "max_tokens", "temperature", "logprobs",
                         "logprob_token_ids", "return_tokens_as_token_ids",
                         "chat_template_kwargs", "vllm_xargs"}
    assert not FORBIDDEN_FIELDS & set(body)
    assert body["temperature"] == 1.0  # sent: a checkpoint's own default would be a 400
    assert body["model"] == "dgemma-26b" and body["logprobs"] is True
    assert body["max_tokens"] == 6  # "q0: yes" (4) + turn close, plus one
    assert body["logprob_token_ids"] == list(unit.logprob_ids)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["messages"] == [dict(m) for m in unit.messages]
    xargs = body["vllm_xargs"]
    assert set(xargs) == {"diffusion_seed_canvas", "diffusion_canvas_length",
                          "diffusion_max_steps", "diffusion_read_only"}
    assert xargs["diffusion_canvas_length"] == unit.width == len(xargs["diffusion_seed_canvas"])
    assert xargs["diffusion_max_steps"] == 1 and xargs["diffusion_read_only"] is True
    assert req.slots == (3,) and req.seed == 99 and (req.unit, req.draw) == (0, 0)
    assert req.endpoint is Endpoint.CHAT


def test_a_chat_read_continues_the_thought_block_after_the_generation_prompt(
        standin_tokenizer: HFTextTokenizer) -> None:
    """The vllm layout always adds the thought block to the prompt; on chat the server renders
    it by continuing a final assistant message that holds it."""
    settings = ReadSettings()
    unit = unit_for(standin_tokenizer, settings)
    body = build_request(unit, settings, draw=1, seed=3, vocab_size=VOCAB).body
    assert body["messages"][-1] == {"role": "assistant", "content": unit.prefill}
    assert body["add_generation_prompt"] is False and body["continue_final_message"] is True
    rendered = standin_tokenizer.render_chat(body["messages"], add_generation_prompt=False,
                                             continue_final_message=True)
    assert tuple(rendered) == unit.prompt_ids


def test_pinned_and_constrained_only_when_asked(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings(steps=3, constrained=True)
    unit = unit_for(standin_tokenizer, settings)
    xargs = build_request(unit, settings, draw=0, seed=1, vocab_size=VOCAB).body["vllm_xargs"]
    slot = unit.slots[0].position
    assert xargs["diffusion_pinned"] == [p for p in range(unit.width) if p != slot]
    assert xargs["diffusion_constrained"] is True and xargs["diffusion_max_steps"] == 3


def test_completions_body(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings(endpoint=Endpoint.COMPLETIONS)
    unit = unit_for(standin_tokenizer, settings)
    body = build_request(unit, settings, draw=0, seed=1, vocab_size=VOCAB).body
    assert body["prompt"] == list(unit.prompt_ids)
    assert isinstance(body["logprobs"], int) and not isinstance(body["logprobs"], bool)
    assert "messages" not in body and "chat_template_kwargs" not in body


def test_encoding_is_deterministic_and_keeps_non_ascii(
        standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings()
    a = encode_body(build_request(unit_for(standin_tokenizer, settings), settings, draw=1,
                                  seed=derive_seed(0, 0, "d", "n", 1), vocab_size=VOCAB).body)
    b = encode_body(build_request(unit_for(standin_tokenizer, settings), settings, draw=1,
                                  seed=derive_seed(0, 0, "d", "n", 1), vocab_size=VOCAB).body)
    assert a == b
    assert "Der Himmel ist blau ✓".encode() in a
    keys = list(orjson.loads(a))
    assert keys == sorted(keys)


def test_different_draws_get_different_canvases(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings()
    unit = unit_for(standin_tokenizer, settings)
    canvases = {tuple(build_request(unit, settings, draw=k, seed=derive_seed(0, 0, "d", "n", k),
                                    vocab_size=VOCAB).body["vllm_xargs"]["diffusion_seed_canvas"])
                for k in range(4)}
    assert len(canvases) == 4


def chat_response(rows: dict[int, dict[str, Any]], n: int = 16, **usage: Any) -> dict[str, Any]:
    content = [rows.get(p, {"token": "token_id:0", "logprob": -0.1, "top_logprobs": []})
               for p in range(n)]
    return {"choices": [{"logprobs": {"content": content}}], "usage": usage}


def chat_entry(argmax: int, argmax_lp: float, lps: dict[int, float]) -> dict[str, Any]:
    return {"token": f"token_id:{argmax}", "logprob": argmax_lp,
            "top_logprobs": [{"token": f"token_id:{i}", "logprob": lp} for i, lp in lps.items()]}


def test_parse_chat_response() -> None:
    obj = chat_response({3: chat_entry(461, -0.2, {461: -0.2, 463: -1.8})}, prompt_tokens=120,
                        prompt_tokens_details={"cached_tokens": 96})
    result = parse_response(Endpoint.CHAT, obj, [3], latency_ms=12.5)
    row = result.rows[3]
    assert dict(row.logprobs) == {461: -0.2, 463: -1.8}
    assert (row.argmax_id, row.argmax_logprob) == (461, -0.2)
    assert (result.prompt_tokens, result.cached_tokens, result.latency_ms) == (120, 96, 12.5)


def test_parse_chat_keeps_a_non_label_argmax() -> None:
    obj = chat_response({3: chat_entry(7, -0.1, {461: -3.0, 463: -4.0})})
    row = parse_response(Endpoint.CHAT, obj, [3]).rows[3]
    assert row.argmax_id == 7 and row.logprobs[7] == -0.1 and row.logprobs[461] == -3.0


def test_parse_completions_response() -> None:
    top = [{"token_id:0": -0.1}] * 16
    top[3] = {"token_id:461": -0.3, "token_id:463": -1.5}
    tokens = ["token_id:0"] * 16
    tokens[3] = "token_id:461"
    obj = {"choices": [{"logprobs": {"top_logprobs": top, "tokens": tokens,
                                     "token_logprobs": [-0.3] * 16}}],
           "usage": {"prompt_tokens": 50, "prompt_tokens_details": None}}
    result = parse_response(Endpoint.COMPLETIONS, obj, [3])
    assert dict(result.rows[3].logprobs) == {461: -0.3, 463: -1.5}
    assert result.rows[3].argmax_id == 461
    assert (result.prompt_tokens, result.cached_tokens) == (50, None)


@pytest.mark.parametrize(("endpoint", "obj", "needle"), [
    (Endpoint.CHAT, {"choices": []}, "response has no choices.0.logprobs"),
    (Endpoint.CHAT, {"choices": [{"logprobs": None}]}, "no logprob row for slot position 3"),
    (Endpoint.CHAT, chat_response({}, n=2), "no logprob row for slot position 3 "
                                            "(choices[0].logprobs.content has 2 positions)"),
    (Endpoint.CHAT, chat_response({3: {"token": "yes", "logprob": -1, "top_logprobs": []}}),
     "token 'yes' is not 'token_id:<id>'"),
    (Endpoint.CHAT, chat_response({3: {"logprob": -1}}), "content[3] is not a logprob entry"),
    (Endpoint.COMPLETIONS, {"choices": [{"logprobs": {"top_logprobs": [{}] * 2}}]},
     "no logprob row for slot position 3"),
    (Endpoint.COMPLETIONS, {"choices": [{"logprobs": {"top_logprobs": [{}] * 4}}]},
     "top_logprobs[3] is empty"),
    (Endpoint.CHAT, [1], "not a JSON object"),
])
def test_malformed_responses(endpoint: Endpoint, obj: Any, needle: str) -> None:
    with pytest.raises(MalformedResponse) as err:
        parse_response(endpoint, obj, [3])
    assert needle in err.value.message
    assert err.value.kind == "malformed_response"
