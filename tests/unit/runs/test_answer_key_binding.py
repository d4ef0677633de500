"""``DREADS_ANSWER_API_KEY`` goes to ``DREADS_ANSWER_URL``'s server only (else the upstream's),
and that URL is the default endpoint of a run answered by one."""

from __future__ import annotations

import pytest

from app.config import Settings, run_env
from app.runs.settings import answer_key_url, endpoint_options, endpoint_read_settings
from app.upstream.urls import key_for, same_server, url_problem


@pytest.mark.parametrize(("url", "other", "same"), [
    ("http://vllm:8001", "http://VLLM:8001/v1/", True),
    ("http://h", "http://h:80/v1/systemone", True),
    ("https://api.example.com/v1", "https://api.example.com:443", True),
    ("http://u:pw@h:1", "http://h:1", True),
    ("http://h:1", "http://h:2", False),
    ("http://h:1", "https://h:1", False),
    ("http://127.0.0.1:8001", "http://localhost:8001", False),
    ("http://h:1", "http://h:1.evil.example", False),
    ("sim", "sim", True),
    ("sim", "http://sim", False),
    ("http://[x", "http://x", False),
    ("http://h:port", "http://h", False),
])
def test_one_server(url: str, other: str, same: bool) -> None:
    assert same_server(url, other) is same
    assert (key_for(other, key="k", key_url=url) == "k") is same


@pytest.mark.parametrize("value", ["http://[x", "http://h:port/"])
def test_a_value_no_url_parser_reads_is_a_problem_not_a_crash(value: str) -> None:
    assert f"answer_url {value!r} is not a URL" in str(url_problem(value, name="answer_url"))


def test_no_key_without_a_key_or_its_server() -> None:
    assert key_for("http://h:1", key=None, key_url="http://h:1") is None
    assert key_for("http://h:1", key="k", key_url=None) is None


def test_the_key_belongs_to_the_answer_url_else_the_upstream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREADS_UPSTREAM", "http://vllm:8001")
    monkeypatch.setenv("DREADS_ANSWER_API_KEY", "sk-operator")
    env = run_env(Settings())
    assert answer_key_url(env) == "http://vllm:8001"
    monkeypatch.setenv("DREADS_ANSWER_URL", "https://api.example.com/v1")
    env = run_env(Settings())
    options = endpoint_options(env)
    assert (options.api_key, options.key_url) == ("sk-operator", "https://api.example.com/v1")
    settings = endpoint_read_settings({"answer_by": "decisions", "model": "m"},
                                      upstream="http://vllm:8001", env=env)
    assert settings.answer_url == "https://api.example.com/v1"
