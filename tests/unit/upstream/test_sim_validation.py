"""The simulator rejects what vLLM rejects, with vLLM's 400 body."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.upstream.conftest import AsgiClient

CHAT = "/v1/chat/completions"
Mutation = Callable[[dict[str, Any]], None]


def _x(name: str, value: Any) -> Mutation:
    return lambda b: b["vllm_xargs"].__setitem__(name, value)


def _set(name: str, value: Any) -> Mutation:
    return lambda b: b.__setitem__(name, value)


def _del(name: str) -> Mutation:
    return lambda b: b.pop(name)


def _short_canvas(b: dict[str, Any]) -> None:
    b["vllm_xargs"]["diffusion_seed_canvas"] = b["vllm_xargs"]["diffusion_seed_canvas"][:-1]


def _canvas_oov(b: dict[str, Any]) -> None:
    b["vllm_xargs"]["diffusion_seed_canvas"][-1] = 10**6


def _pinned_without_seed(b: dict[str, Any]) -> None:
    del b["vllm_xargs"]["diffusion_seed_canvas"]
    b["vllm_xargs"]["diffusion_pinned"] = [0, 1]


CASES: list[tuple[str, Mutation, str, str]] = [
    ("seed canvas length != width", _short_canvas, "extra_args", "length"),
    ("canvas id out of vocabulary", _canvas_oov, "extra_args", "out of vocabulary"),
    ("width above the served canvas", _x("diffusion_canvas_length", 336), "extra_args",
     "exceeds the served canvas_length 320"),
    ("pinned without seed canvas", _pinned_without_seed, "extra_args", "requires"),
    ("pinned out of range", _x("diffusion_pinned", [0, 99]), "extra_args", "out of range"),
    ("too many logprob ids", _set("logprob_token_ids", list(range(129))), "logprob_token_ids",
     "greater than max allowed: 128"),
    ("logprob id out of vocabulary", _set("logprob_token_ids", [5, 10**6]),
     "logprob_token_ids", "out of vocabulary"),
    ("temperature other than 1", _set("temperature", 0.0), "temperature", "not yet supported"),
    ("seed", _set("seed", 42), "seed", "not yet supported"),
    ("min_p", _set("min_p", 0.1), "min_p", "not yet supported"),
    ("min_tokens", _set("min_tokens", 2), "min_tokens", "not yet supported"),
    ("logit_bias", _set("logit_bias", {"5": 1.0}), "logit_bias", "not yet supported"),
    ("bad_words", _set("bad_words", ["x"]), "bad_words", "not yet supported"),
    ("allowed_token_ids", _set("allowed_token_ids", [1, 2]), "allowed_token_ids",
     "not yet supported"),
    ("response_format", _set("response_format", {"type": "json_object"}), "response_format",
     "Structured outputs"),
    ("structured_outputs", _set("structured_outputs", {"json": {}}), "structured_outputs",
     "Structured outputs"),
    ("max_tokens below 1", _set("max_tokens", 0), "max_tokens", "at least 1"),
    ("missing logprobs", _del("logprobs"), "logprobs", "logprobs"),
]


@pytest.mark.parametrize(("name", "mutate", "param", "needle"), CASES, ids=[c[0] for c in CASES])
async def test_each_rule_answers_vllms_400_body(
    asgi_client: AsgiClient, body: dict[str, Any], name: str, mutate: Mutation, param: str,
    needle: str,
) -> None:
    client = asgi_client()
    mutate(body)
    response = await client.post(CHAT, json=body)
    assert response.status_code == 400, name
    error = response.json()["error"]
    assert error["type"] == "BadRequestError"
    assert error["code"] == 400
    assert error["param"] == param
    assert needle in error["message"]


async def test_a_valid_body_is_answered(asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    response = await asgi_client().post(CHAT, json=body)
    assert response.status_code == 200, response.text


async def test_temperature_one_is_accepted(asgi_client: AsgiClient,
                                           body: dict[str, Any]) -> None:
    body["temperature"] = 1.0
    assert (await asgi_client().post(CHAT, json=body)).status_code == 200


async def test_unknown_model_is_404_naming_it(asgi_client: AsgiClient,
                                              body: dict[str, Any]) -> None:
    body["model"] = "other"
    response = await asgi_client().post(CHAT, json=body)
    assert response.status_code == 404
    assert "`other` does not exist" in response.json()["error"]["message"]


async def test_rejections_are_counted(asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    client = asgi_client()
    body["seed"] = 1
    await client.post(CHAT, json=body)
    stats = (await client.get("/sim/stats")).json()
    assert stats["rejected"] == 1
    assert stats["reads"] == 0


async def test_a_prompt_past_max_model_len_is_refused_as_vllm_does(
        asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    client = asgi_client(max_model_len=400)
    body["messages"][-1]["content"] += " word" * 500
    response = await client.post(CHAT, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "input_tokens"
    assert error["message"].startswith("This model's maximum context length is 400 tokens.")
    assert (await client.get("/sim/stats")).json()["reads"] == 0
