"""Jev requests to decisions and answers back (``app.api.jev``): pure, no server."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.jev import Unaskable, answers_of, input_tokens, to_decision
from app.api.schemas import SystemOneIn
from app.engine import (
    Answer,
    DrawRecord,
    SlotRead,
    StopReason,
)


def request(questions: dict[str, Any], **extra: Any) -> SystemOneIn:
    return SystemOneIn.model_validate({"model": "jev-latest", "state": {"msg": "hi"},
                                       "questions": questions, **extra})


def answer(qid: str, qtype: str, probs: dict[str, float], **fields: Any) -> Answer:
    top = max(probs, key=probs.__getitem__)
    base: dict[str, Any] = dict(
        question_id=qid, question_type=qtype, label=top, option=top, probs=probs,
        p_yes=None, expected_level=None, legend=None, confidence=0.5, top_prob=probs[top],
        stderr=None, agreement=None, draws=1, stop_reason=StopReason.NEAR_CERTAIN,
        label_mass=0.9, min_label_mass=0.9, argmax_is_label=True, entropy=0.3)
    return Answer(**{**base, **fields})


def test_a_request_becomes_one_decision_with_the_request_id() -> None:
    decision = to_decision("req_1", request({
        "spam": {"type": "noul", "criteria": {"true": "advertising"}},
        "tone": {"type": "choice", "criteria": {"angry": None, "calm": {"cue": "polite"}}},
        "urgency": {"type": "score", "instructions": "How urgent?",
                    "criteria": ["later", "now"]}}))
    assert decision.id == "req_1" and decision.state == {"msg": "hi"}
    spam, tone, urgency = decision.questions
    assert (spam.labels, spam.descriptions) == (("yes", "no"), ("advertising", None))
    assert (tone.labels, tone.options) == (("A", "B"), ("angry", "calm"))
    assert tone.descriptions == (None, '{"cue": "polite"}')
    assert (urgency.labels, urgency.options) == (("1", "2"), ("later", "now"))


def test_the_record_extension_names_the_decision_cell_and_expected_answers() -> None:
    decision = to_decision("req_2", request(
        {"spam": {"type": "noul", "instructions": "Spam?"}},
        dreads={"run": "live", "id": "m-17", "cell": "inbox", "expected": {"spam": True}}))
    assert (decision.id, decision.cell, dict(decision.expected)) == ("m-17", "inbox",
                                                                   {"spam": "yes"})


@pytest.mark.parametrize(("questions", "extra", "needle"), [
    ({"b": {"type": "box"}}, {}, "is a box question"),
    ({"s": {"type": "score", "criteria": [str(i) for i in range(11)]}}, {},
     "Too many score levels. Must have at most 10 levels."),
    ({"c": {"type": "choice", "criteria": {str(i): None for i in range(27)}}}, {},
     "Too many choices."),
    ({"a:b": {"type": "noul", "instructions": "x"}}, {}, "contains ':'"),
    ({f"q{i}": {"type": "noul", "instructions": "x"} for i in range(257)}, {},
     "Too many questions. Must have at most 256 questions per request"),
    ({"q": {"type": "noul", "instructions": "x"}}, {"assets": {"i": {}}},
     "asset 'i' has no image"),
    ({"q": {"type": "noul", "instructions": "x"}}, {"audio": ["data:audio/wav;base64,AA=="]},
     "this model does not take audio inputs: it reads images only"),
    ({"q": {"type": "noul", "instructions": "x"}}, {"instructions": "Be strict."},
     "top-level 'instructions' are not read"),
    ({"q": {"type": "noul", "instructions": "x"}},
     {"chat_template_kwargs": {"enable_thinking": True}}, "only enable_thinking: false"),
    ({"q": {"type": "noul", "instructions": "x"}},
     {"dreads": {"run": "r", "expected": {"q": "maybe"}}}, "expected value 'maybe'"),
])
def test_what_cannot_be_asked_is_unaskable_with_the_reason(
        questions: dict[str, Any], extra: dict[str, Any], needle: str) -> None:
    with pytest.raises(Unaskable) as err:
        to_decision("req_3", request(questions, **extra))
    assert needle in err.value.message


def test_images_and_assets_become_the_decisions_images_in_order() -> None:
    png = "iVBORw0KGgo="
    decision = to_decision("req_3", request(
        {"damage": {"type": "noul", "instructions": "Does <img-a> show damage?"}},
        state="<img-a>", images=["https://example.com/a.png"],
        assets={"<img-a>": {"type": "image", "format": "png", "data_base64": png},
                "<img-b>": {"type": "image", "part": "asset-1"}}),
        parts={"asset-1": ("application/octet-stream", b"\x89PNG")})
    assert decision.images == ("https://example.com/a.png", f"data:image/png;base64,{png}",
                               "data:application/octet-stream;base64,iVBORw==")
    assert decision.state is None  # the state was the image alone
    assert decision.questions[0].instructions == "Does [image 2] show damage?"


def test_vllms_reader_fields_are_taken_and_the_request_id_names_the_decision() -> None:
    decision = to_decision("req_4", request(
        {"q": {"type": "noul", "instructions": "x"}}, request_id="vllm-7", cache_salt="s",
        priority=3, joint=False, chat_template_kwargs={"enable_thinking": False},
        audio=[], videos=None))
    assert decision.id == "vllm-7"


def test_an_asset_part_the_request_lacks_is_unaskable() -> None:
    with pytest.raises(Unaskable, match="names part 'asset-0', which the request does not "
                                        "carry"):
        to_decision("req_5", request({"q": {"type": "noul", "instructions": "x"}},
                                     assets={"a": {"type": "image", "part": "asset-0"}}))


def test_answers_take_jevs_shapes_in_the_requests_order() -> None:
    decision = to_decision("r", request({
        "urgency": {"type": "score", "criteria": ["later", "soon", "now"]},
        "tone": {"type": "choice", "criteria": {"angry": None, "calm": None}},
        "spam": {"type": "noul", "instructions": "Spam?"}}))
    answers = [
        answer("spam", "noul", {"yes": 0.8, "no": 0.2}, p_yes=0.8),
        answer("tone", "choice", {"A": 0.3, "B": 0.7}, option="calm"),
        answer("urgency", "score", {"1": 0.2, "2": 0.3, "3": 0.5},
               expected_level=1.3, legend={"0": "later", "1": "soon", "2": "now"}),
    ]
    jev = answers_of(decision, answers)
    assert list(jev) == ["urgency", "tone", "spam"]
    assert jev["spam"] == {"type": "noul", "noul": 0.8}
    assert jev["tone"] == {"type": "choice", "choice": "calm", "confidence": 0.5,
                           "probabilities": {"angry": 0.3, "calm": 0.7}}
    assert jev["urgency"] == {"type": "score", "score": 1.3, "confidence": 0.5,
                              "legend": {"0": "later", "1": "soon", "2": "now"},
                              "probabilities": {"0": 0.2, "1": 0.3, "2": 0.5}}


def _draw(unit: int, draw: int, prompt_tokens: int | None) -> DrawRecord:
    read = SlotRead(question_index=unit, draw=draw, probs=(0.5, 0.5),
                    label_logprobs=(-0.7, -0.7), label_mass=1.0, entropy=0.69, argmax_id=1,
                    argmax_is_label=True)
    return DrawRecord(unit=unit, draw=draw, seed=0, read=read, latency_ms=1.0,
                      prompt_tokens=prompt_tokens, cached_tokens=None)


def test_input_tokens_count_each_canvas_once() -> None:
    draws = [_draw(0, 0, 100), _draw(0, 1, 100), _draw(1, 0, 120), _draw(2, 0, None)]
    assert input_tokens(draws) == 220
