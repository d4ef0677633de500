"""The official Jev client, ``typesafe-sdk`` from PyPI, against a real ``dreads serve``.

The SDK is pointed at the server with ``TYPESAFE_BASE_URL`` only, as a user would, and must
decode every answer type, list the models, and carry the server's request id.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import pytest
from typesafe_sdk import (
    AsyncTypeSafeClient,
    Choice,
    Noul,
    Score,
    TypeSafeBadRequestError,
    TypeSafeClient,
)

from tests.fixtures.api import ServeProcess

QUESTIONS = {
    "billing": Noul(instructions="Is this message about billing?"),
    "spam": Noul(criteria={"true": "Unsolicited advertising", "false": "A real conversation"}),
    "tone": Choice(instructions="What is the tone?",
                   criteria={"angry": "upset or hostile", "calm": None, "excited": None}),
    "urgency": Score(instructions="How urgent is it?",
                     criteria=["Can wait", "This week", {"level": "Today"}]),
}


@pytest.fixture(scope="module")
def server(module_serve_factory: Callable[..., ServeProcess]) -> ServeProcess:
    return module_serve_factory("--upstream", "sim")


@pytest.fixture
def client(server: ServeProcess, monkeypatch: pytest.MonkeyPatch) -> TypeSafeClient:
    monkeypatch.setenv("TYPESAFE_BASE_URL", server.url)
    monkeypatch.setenv("TYPESAFE_API_KEY", "unused-without-DREADS_API_KEY")
    return TypeSafeClient()


def test_sdk_decodes_noul_choice_and_score_answers(client: TypeSafeClient) -> None:
    result = client.system_one(state="I was charged twice for my order. Please refund today!",
                               questions=QUESTIONS)
    assert set(result.answers) == set(QUESTIONS)
    assert result.model == "dgemma"
    for name in ("billing", "spam"):
        assert 0.0 <= result.nouls[name].noul <= 1.0
    tone = result.choices["tone"]
    assert set(tone.probabilities) == {"angry", "calm", "excited"}
    assert tone.choice == max(tone.probabilities, key=tone.probabilities.__getitem__)
    assert math.isclose(sum(tone.probabilities.values()), 1.0, abs_tol=1e-6)
    assert 0.0 <= tone.confidence <= 1.0
    urgency = result.scores["urgency"]
    assert urgency.legend == {0: "Can wait", 1: "This week", 2: '{"level": "Today"}'}
    assert set(urgency.probabilities) == {0, 1, 2}
    expectation = sum(level * p for level, p in urgency.probabilities.items())
    assert math.isclose(urgency.score, expectation, rel_tol=1e-9)
    assert result.usage.input_tokens > 0 and result.usage.output_tokens == 0
    assert result.request_id.startswith("req_")


def test_sdk_sends_json_state_and_a_zstd_compressed_body(client: TypeSafeClient) -> None:
    """A body over 1 KiB goes zstd-compressed from the SDK (it finds backports.zstd)."""
    state = {"subject": "Duplicate charge", "body": "I was charged twice. " * 200}
    result = client.system_one(state=state, questions={"billing": QUESTIONS["billing"]})
    raw = result.raw_http_response
    assert raw.request.headers.get("content-encoding") == "zstd"
    assert 0.0 <= result.nouls["billing"].noul <= 1.0


def test_sdk_lists_the_served_model_and_the_jev_aliases(client: TypeSafeClient) -> None:
    names = [m.name for m in client.models.list().models]
    assert names == ["dgemma", "jev-latest", "jev-preview"]


def test_sdk_raises_its_bad_request_error_for_an_unknown_model(client: TypeSafeClient) -> None:
    with pytest.raises(TypeSafeBadRequestError) as err:
        client.system_one(state="x", questions={"q": QUESTIONS["billing"]}, model="jev-1.13.0")
    assert "Unknown model: jev-1.13.0" in str(err.value)


def test_async_sdk_answers_concurrent_requests(server: ServeProcess) -> None:
    async def ask() -> list[float]:
        async with AsyncTypeSafeClient(api_key="k", base_url=server.url) as client:
            results = await asyncio.gather(*(
                client.system_one(state=f"Invoice {i} was paid twice.",
                                  questions={"billing": QUESTIONS["billing"]})
                for i in range(8)))
        return [r.nouls["billing"].noul for r in results]

    answers = asyncio.run(ask())
    assert len(answers) == 8 and all(0.0 <= p <= 1.0 for p in answers)
