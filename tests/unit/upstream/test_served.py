"""Defaults for model and tokenizer come from the server when the user set neither."""

from __future__ import annotations

import httpx
import pytest

from app.config import Settings, run_env
from app.errors import ConfigError, UpstreamUnavailable
from app.runs.settings import base_read_settings
from app.upstream.served import served_identity


def _server(version: str, models: list[dict[str, object]]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": models})
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": version})
        return httpx.Response(404)

    return httpx.MockTransport(handle)


def test_a_vllm_server_names_the_model_and_its_tokenizer() -> None:
    served = served_identity("http://pod:8001", transport=_server(
        "0.32.0", [{"id": "RedHatAI/diffusiongemma-26B-A4B-it-FP8-dynamic",
                    "max_model_len": 8192}]))
    assert served.model_id == "RedHatAI/diffusiongemma-26B-A4B-it-FP8-dynamic"
    assert not served.is_sim


def test_the_simulator_is_recognised_by_its_version() -> None:
    served = served_identity("http://sim:8001", transport=_server(
        "dreads-sim 0.1.0", [{"id": "dgemma"}]))
    assert served.is_sim and served.model_id == "dgemma"


def test_a_server_listing_no_model_says_to_pass_model_and_tokenizer() -> None:
    with pytest.raises(ConfigError, match="--model and --tokenizer"):
        served_identity("http://pod:8001", transport=_server("0.32.0", []))


def test_an_unreachable_server_says_what_to_do() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(UpstreamUnavailable, match="start the server first, or pass --model"):
        served_identity("http://pod:8001", transport=httpx.MockTransport(refuse))


def test_settings_given_by_flag_or_environment_never_ask_the_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # An unreachable upstream would raise if it were asked.
    given = base_read_settings({"model": "m", "tokenizer": "standin"}, env=run_env(Settings()),
                               upstream="http://127.0.0.1:9")
    assert (given.model, given.tokenizer) == ("m", "standin")
    monkeypatch.setenv("DREADS_MODEL", "dgemma")
    monkeypatch.setenv("DREADS_TOKENIZER", "standin")
    from_env = base_read_settings({}, env=run_env(Settings()), upstream="http://127.0.0.1:9")
    assert (from_env.model, from_env.tokenizer) == ("dgemma", "standin")


def test_the_in_process_simulator_needs_no_request() -> None:
    settings = base_read_settings({}, env=run_env(Settings()), upstream="sim")
    assert settings.tokenizer == "standin"
