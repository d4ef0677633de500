"""The simulator rejects what vLLM rejects, with vLLM's 400 body."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.sim.conftest import AsgiClient

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


SAMPLING = ("The temperature, min_p, seed, min_tokens, logit_bias, bad_words, and "
            "allowed_token_ids sampling parameters are not yet supported with diffusion models.")
XARGS = " (parameter=extra_args)"

#: (case, mutation, param, the whole message vLLM 0.33 answers)
CASES: list[tuple[str, Mutation, str | None, str]] = [
    ("seed canvas length != width", _short_canvas, "extra_args",
     "diffusion_seed_canvas must hold exactly 16 ids, got 15." + XARGS),
    ("canvas id out of vocabulary", _canvas_oov, "extra_args",
     "diffusion_seed_canvas ids must be in [0, 800)." + XARGS),
    ("width above the served canvas", _x("diffusion_canvas_length", 336), "extra_args",
     "diffusion_canvas_length must be a positive integer no larger than the served canvas."
     + XARGS),
    ("pinned without seed canvas", _pinned_without_seed, "extra_args",
     "diffusion_pinned needs a diffusion_seed_canvas to hold." + XARGS),
    ("pinned out of range", _x("diffusion_pinned", [0, 99]), "extra_args",
     "diffusion_pinned positions must lie inside the canvas." + XARGS),
    ("too many logprob ids", _set("logprob_token_ids", list(range(129))), "logprob_token_ids",
     "Requested logprob_token_ids of length 129, which is greater than max allowed: 128 "
     "(parameter=logprob_token_ids, value=129)"),
    ("logprob id out of vocabulary", _set("logprob_token_ids", [5, 10**6]),
     "logprob_token_ids", "token_id(s) [1000000] in logprob_token_ids contain out-of-vocab "
     "token ids. Vocabulary size: 800 (parameter=logprob_token_ids, value=[1000000])"),
    ("temperature other than 1", _set("temperature", 0.0), None, SAMPLING),
    ("seed", _set("seed", 42), None, SAMPLING),
    ("min_p", _set("min_p", 0.1), None, SAMPLING),
    ("min_tokens", _set("min_tokens", 2), None, SAMPLING),
    ("logit_bias", _set("logit_bias", {"5": 1.0}), None, SAMPLING),
    ("bad_words", _set("bad_words", ["x"]), None, SAMPLING),
    ("allowed_token_ids", _set("allowed_token_ids", [1, 2]), None, SAMPLING),
    ("response_format", _set("response_format", {"type": "json_object"}), None,
     "Structured outputs are not yet supported for diffusion language models. Remove the "
     "structured output constraint (e.g. `response_format`, `structured_outputs`) from the "
     "request."),
    ("max_tokens below 1", _set("max_tokens", 0), "max_tokens",
     "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"),
]


@pytest.mark.parametrize(("name", "mutate", "param", "message"), CASES,
                         ids=[c[0] for c in CASES])
async def test_each_rule_answers_vllms_400_body(
    asgi_client: AsgiClient, body: dict[str, Any], name: str, mutate: Mutation,
    param: str | None, message: str,
) -> None:
    client = asgi_client()
    mutate(body)
    response = await client.post(CHAT, json=body)
    assert response.status_code == 400, name
    assert response.json() == {"error": {"message": message, "type": "BadRequestError",
                                         "param": param, "code": 400}}


async def test_logprob_ids_without_logprobs_is_a_request_validation_error(
        asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    del body["logprobs"]
    response = await asgi_client().post(CHAT, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("Bad Request", "logprob_token_ids")
    assert "when using `logprob_token_ids`, `logprobs` must be set to true." in error["message"]


async def test_what_vllm_accepts_is_answered(asgi_client: AsgiClient,
                                             body: dict[str, Any]) -> None:
    """A read that is not read-only, and a request with no seed canvas, are answered."""
    client = asgi_client()
    body["vllm_xargs"]["diffusion_read_only"] = False
    assert (await client.post(CHAT, json=body)).status_code == 200
    del body["vllm_xargs"]["diffusion_seed_canvas"]
    response = await client.post(CHAT, json=body)
    assert response.status_code == 200
    assert len(response.json()["choices"][0]["logprobs"]["content"]) == body["max_tokens"]


async def test_a_checkpoint_default_temperature_refuses_reads_that_send_none(
        asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    """vLLM takes the generation config's temperature when a read sends none: anything but 1
    makes a diffusion read a 400. dreads sends temperature 1.0, which is accepted."""
    client = asgi_client(default_temperature=0.7)
    assert body["temperature"] == 1.0
    assert (await client.post(CHAT, json=body)).status_code == 200
    del body["temperature"]
    response = await client.post(CHAT, json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == SAMPLING


async def test_a_valid_body_is_answered(asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    response = await asgi_client().post(CHAT, json=body)
    assert response.status_code == 200, response.text


async def test_unknown_model_is_404_naming_it(asgi_client: AsgiClient,
                                              body: dict[str, Any]) -> None:
    body["model"] = "other"
    response = await asgi_client().post(CHAT, json=body)
    assert response.status_code == 404
    assert response.json()["error"] == {
        "message": "The model `other` does not exist. Valid aliases: dgemma.",
        "type": "NotFoundError", "param": "model", "code": 404}


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
    body["messages"][0]["content"] += " word" * 500
    response = await client.post(CHAT, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "input_tokens"
    n = int(error["message"].split("your prompt contains ")[1].split()[0])
    assert n > 400
    assert error["message"] == (
        f"This model's maximum context length is 400 tokens. However, your prompt contains {n} "
        "input tokens, which exceeds this limit even without any output tokens. Please reduce "
        f"the length of the input prompt. (parameter=input_tokens, value={n})")
    assert (await client.get("/sim/stats")).json()["reads"] == 0


async def test_a_prompt_that_leaves_too_little_room_gets_its_canvas_cut(
        asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    """As vLLM: admitted, ``max_tokens`` cut to what fits, so the later rows are missing."""
    probe = asgi_client()
    first = (await probe.post(CHAT, json=body)).json()
    n_prompt = first["usage"]["prompt_tokens"]
    client = asgi_client(max_model_len=n_prompt + 1)
    response = await client.post(CHAT, json=body)
    assert response.status_code == 200
    assert len(response.json()["choices"][0]["logprobs"]["content"]) == 1
    assert (await client.get("/sim/stats")).json()["truncated"] == 1


async def test_an_api_key_guards_every_v1_route(asgi_client: AsgiClient,
                                                body: dict[str, Any]) -> None:
    client = asgi_client(api_key="s3cret-key")
    for method, path in (("GET", "/v1/models"), ("POST", CHAT)):
        response = await client.request(method, path, json=body)
        assert (response.status_code, response.json()) == (401, {"error": "Unauthorized"})
        wrong = await client.request(method, path, json=body,
                                     headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        right = await client.request(method, path, json=body,
                                     headers={"Authorization": "Bearer s3cret-key"})
        assert right.status_code == 200
    assert (await client.get("/health")).status_code == 200
    assert (await client.get("/version")).status_code == 200
