"""The official ``openai`` SDK's ``client.decisions.create`` against a real ``dreads serve``.

The SDK is pointed at the server with ``base_url`` only, as an application would, and must
decode every answer type (sync and async), keep typed choice values typed, raise its own
exception classes for dreads' errors, and retry 529 and 503 after ``retry-after``.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.decision import (
    AnswerAnswerResourceChoice,
    AnswerAnswerResourcePredicate,
    AnswerAnswerResourceScore,
    Decision,
)

from app.sim import SimHandle, SimOptions, start_sim_thread
from tests.fixtures.api import ServeProcess
from tests.fixtures.services import ROOT

KEY = "s3cret-key"
INPUT = "I was charged twice for my order. Please refund today!"
BILLING = {"type": "predicate", "name": "billing",
           "instructions": "The message is about billing."}
TONE = {"type": "choice", "name": "tone", "instructions": "What is the tone?",
        "choices": [{"value": "angry", "description": "upset or hostile"},
                    {"value": "calm"}, {"value": "excited"}]}
URGENCY = {"type": "score", "name": "urgency", "instructions": "How urgent is it?",
           "levels": [{"label": "low", "description": "can wait"}, {"label": "medium"},
                      {"label": "high", "description": "today"}]}


@pytest.fixture(scope="module")
def server(module_serve_factory: Callable[..., ServeProcess]) -> ServeProcess:
    return module_serve_factory("--upstream", "sim", env={"DREADS_API_KEY": KEY})


@pytest.fixture
def client(server: ServeProcess) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)


def _check_answers(decision: Decision) -> None:
    billing, tone, urgency = decision.answers
    assert isinstance(billing, AnswerAnswerResourcePredicate)
    assert billing.name == "billing" and 0.0 <= billing.probability <= 1.0
    assert isinstance(tone, AnswerAnswerResourceChoice)
    assert [p.value for p in tone.probabilities] == ["angry", "calm", "excited"]
    assert math.isclose(sum(p.probability for p in tone.probabilities), 1.0, abs_tol=1e-6)
    top = max(tone.probabilities, key=lambda p: p.probability)
    assert tone.choice == top.value
    assert 0.0 < tone.confidence <= top.probability
    assert isinstance(urgency, AnswerAnswerResourceScore)
    assert [(p.value, p.label) for p in urgency.probabilities] == [
        (0, "low"), (1, "medium"), (2, "high")]
    expectation = sum(p.value * p.probability for p in urgency.probabilities)
    assert math.isclose(urgency.score, expectation, rel_tol=1e-9)
    assert decision.usage.input_tokens > 0 and decision.usage.output_tokens == 0
    assert decision.usage.total_tokens == decision.usage.input_tokens


def test_sdk_decodes_predicate_choice_and_score_answers(client: OpenAI) -> None:
    decision = client.decisions.create(model="dgemma", input=INPUT,
                                       questions=[BILLING, TONE, URGENCY])
    assert decision.model == "dgemma"
    _check_answers(decision)
    extension = (decision.model_extra or {})["dreads"]  # dreads' diagnostics, beside the SDK's
    assert set(extension["questions"]) == {"billing", "tone", "urgency"}
    assert extension["reads"] >= 3
    assert extension["questions"]["billing"]["draws"] >= 1


def test_async_sdk_answers_concurrent_requests(server: ServeProcess) -> None:
    async def ask() -> list[Decision]:
        async with AsyncOpenAI(base_url=f"{server.url}/v1", api_key=KEY) as client:
            return await asyncio.gather(*(
                client.decisions.create(model="dgemma", input=f"Invoice {i} was paid twice.",
                                        questions=[BILLING, TONE, URGENCY])
                for i in range(6)))

    for decision in asyncio.run(ask()):
        _check_answers(decision)


def test_boolean_and_string_choice_values_stay_distinct(client: OpenAI) -> None:
    choices = [{"value": True}, {"value": "true"}, {"value": False}, {"value": "false"}]
    decision = client.decisions.create(
        model="dgemma", input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Refund requested:"},
            {"type": "input_json", "data": {"order": 17, "charged": 2}}]}],
        questions=[{"type": "choice", "instructions": "Is a refund due?", "choices": choices}])
    (answer,) = decision.answers
    assert isinstance(answer, AnswerAnswerResourceChoice)
    assert answer.name is None
    values = [p.value for p in answer.probabilities]
    assert values == [True, "true", False, "false"]
    assert [type(v) for v in values] == [bool, str, bool, str]
    assert type(answer.choice) is type(values[[p.probability for p in answer.probabilities]
                                              .index(max(p.probability for p in
                                                         answer.probabilities))])
    # four options read, each by its own label: not folded into two
    assert len((decision.model_extra or {})["dreads"]["questions"]["0"]["probs"]) == 4


def test_an_unnamed_question_is_known_by_its_position(client: OpenAI) -> None:
    decision = client.decisions.create(model="dgemma", input=INPUT, questions=[
        {"type": "predicate", "instructions": "About billing?"}, BILLING])
    assert [a.name for a in decision.answers] == [None, "billing"]
    assert set((decision.model_extra or {})["dreads"]["questions"]) == {"0", "billing"}


# -- errors: the SDK's own classes, OpenAI's error object --------------------------------------
@pytest.mark.parametrize(("question", "param", "text"), [
    ({**TONE, "choices": [{"value": f"option {i}"} for i in range(27)]},
     "questions[0].choices", "has 27 choices; dreads reads at most 26"),
    ({**URGENCY, "levels": [{"label": f"level {i}"} for i in range(11)]},
     "questions[0].levels", "has 11 levels; at most 10 are allowed"),
    ({"type": "predicate", "instructions": [{"type": "input_image",
                                             "image_url": "https://example.com/a.png"}]},
     "questions[0].instructions", "images in a question's instructions are not read"),
    ({**TONE, "choices": [{"value": "a"}, {"value": "a"}]},
     "questions[0].choices[1].value", "duplicate choice \"a\""),
    ({"type": "bool", "instructions": "x"}, "questions[0].type", "unknown question type"),
])
def test_questions_dreads_cannot_ask_are_400_bad_request_errors(
        client: OpenAI, question: dict[str, Any], param: str, text: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.decisions.create(model="dgemma", input=INPUT, questions=[question])
    body = err.value.body
    assert isinstance(body, dict)
    assert body["type"] == "invalid_request_error" and body["param"] == param
    assert text in body["message"]


def test_a_malformed_body_is_400_not_422(server: ServeProcess) -> None:
    headers = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
    for content in (b"{not json", b"[1, 2]", b'{"model": "dgemma", "input": "x"}'):
        response = httpx.post(f"{server.url}/v1/decisions", content=content, headers=headers)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"]
        assert set(error) == {"message", "type", "param", "code"}


def test_unknown_model_is_404_and_a_wrong_key_401(server: ServeProcess, client: OpenAI
                                                   ) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.decisions.create(model="gpt-6-luna", input=INPUT, questions=[BILLING])
    assert isinstance(err.value.body, dict) and err.value.body["code"] == "model_not_found"
    assert "'dgemma'" in err.value.message
    wrong = OpenAI(base_url=f"{server.url}/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="Invalid API key"):
        wrong.decisions.create(model="dgemma", input=INPUT, questions=[BILLING])
    missing = httpx.post(f"{server.url}/v1/decisions", json={"model": "dgemma"})
    assert missing.status_code == 403
    assert missing.json()["error"]["type"] == "permission_error"


def test_a_body_over_the_limit_is_413_in_openais_shape(client: OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client.decisions.create(model="dgemma", input="x" * (9 << 20), questions=[BILLING])
    assert err.value.status_code == 413
    body = err.value.body
    assert isinstance(body, dict) and body["code"] == "request_too_large"
    assert "DREADS_API_MAX_BODY_MB" in body["message"]


def test_models_list_in_openais_shape(client: OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["dgemma"]


# -- 529 and 503: the SDK retries after retry-after ---------------------------------------------
@pytest.fixture(scope="module")
def slow_sim() -> Iterator[SimHandle]:
    handle = start_sim_thread(SimOptions(step_ms=300, max_batch=64))
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def small(module_serve_factory: Callable[..., ServeProcess], slow_sim: SimHandle
          ) -> ServeProcess:
    """One request at a time, one draw, no read retries, a simulator with a 300 ms step."""
    return module_serve_factory("--upstream", slow_sim.url, "--max-concurrent", "1",
                                "--draws", "1", env={"DREADS_READ_RETRIES": "0"})


def test_sdk_retries_529_after_retry_after(small: ServeProcess) -> None:
    async def burst() -> list[Any]:
        async with AsyncOpenAI(base_url=f"{small.url}/v1", api_key="k", max_retries=5) as c:
            return await asyncio.gather(*(
                c.decisions.with_raw_response.create(model="dgemma", input=INPUT,
                                                     questions=[BILLING])
                for _ in range(3)))

    responses = asyncio.run(burst())
    assert all(r.http_response.status_code == 200 for r in responses)
    assert sum(r.retries_taken for r in responses) >= 2  # two of three waited for the slot
    for r in responses:
        assert isinstance(r.parse().answers[0], AnswerAnswerResourcePredicate)


def test_sdk_retries_503_after_retry_after(small: ServeProcess, slow_sim: SimHandle) -> None:
    httpx.post(f"{slow_sim.url}/sim/down", params={"seconds": 1}).raise_for_status()
    client = OpenAI(base_url=f"{small.url}/v1", api_key="k", max_retries=3)
    raw = client.decisions.with_raw_response.create(model="dgemma", input=INPUT,
                                                    questions=[BILLING])
    assert raw.retries_taken >= 1
    assert raw.http_response.status_code == 200
    down = httpx.post(f"{slow_sim.url}/sim/down", params={"seconds": 30})
    down.raise_for_status()
    try:
        response = httpx.post(f"{small.url}/v1/decisions", timeout=30.0, json={
            "model": "dgemma", "input": INPUT, "questions": [BILLING]})
    finally:
        httpx.post(f"{slow_sim.url}/sim/up").raise_for_status()
    assert response.status_code == 503 and response.headers["retry-after"] == "2"
    assert response.json()["error"]["message"].startswith("the model server is unavailable")


def test_answers_recorded_into_a_run_come_back_as_batch_output(client: OpenAI,
                                                               server: ServeProcess) -> None:
    """``extra_body={"dreads": {"run": ...}}`` records the decision, as on /v1/systemone; the
    run's results in openai-batch format give back the same answers, values still typed."""
    choice = {"type": "choice", "name": "refund", "instructions": "Is a refund due?",
              "choices": [{"value": True}, {"value": "true"}]}
    decision = client.decisions.create(
        model="dgemma", input=INPUT, questions=[BILLING, choice],
        extra_body={"dreads": {"run": "live-decisions", "id": "ticket-1", "cell": "web",
                               "expected": {"billing": True, "refund": "true"}}})
    recorded = (decision.model_extra or {})["dreads"]["recorded"]
    assert recorded["run"] == "live-decisions" and recorded["id"] == "ticket-1"
    response = httpx.get(f"{server.url}/v1/runs/live-decisions/results",
                         params={"format": "openai-batch"},
                         headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 200
    (line,) = [json.loads(x) for x in response.text.splitlines()]
    assert line["custom_id"] == "ticket-1" and line["error"] is None
    stored = Decision.model_validate(line["response"]["body"])
    assert stored.answers == decision.answers
    diagnostics = line["response"]["body"]["dreads"]["questions"]
    assert diagnostics["billing"]["expected"] == "yes" and diagnostics["refund"]["expected"] == "B"


def _docs_block(heading: str, language: str) -> str:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1]
    return section.split(f"```{language}\n", 1)[1].split("```", 1)[0]


def test_the_readme_sdk_example_runs_as_written(small: ServeProcess) -> None:
    """The five lines of docs/api.md, against ``dreads serve`` with no key (only the port
    differs)."""
    code = _docs_block("Use dreads as an OpenAI Decisions endpoint", "python")
    assert len(code.strip().splitlines()) == 5
    code = code.replace("http://127.0.0.1:8000", small.url)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert 0.0 <= float(out.stdout) <= 1.0
