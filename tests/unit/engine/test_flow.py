"""DecisionFlow end to end over scripted read results (the part vLLM plays)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from app.engine import (
    DecisionFlow,
    DecisionPlan,
    Endpoint,
    PolicyName,
    ReadMode,
    ReadRequest,
    ReadResult,
    ReadSettings,
    SlotRow,
    StopReason,
    build_probe_request,
    derive_seed,
    encode_body,
    parse_decision,
    plan_decision,
)
from app.errors import MalformedResponse
from app.tokenizer.hf import HFTextTokenizer

NOUL = {"type": "noul", "instructions": "Conflict?"}
CHOICE = {"type": "choice", "instructions": "Who?", "criteria": {"buyer": None, "seller": None,
                                                                 "nobody": None}}
#: (unit, draw) -> first-label probability per slot of the unit
Script = Callable[[int, int], float]


def plan_for(tok: HFTextTokenizer, settings: ReadSettings,
             questions: dict[str, Any] | None = None) -> DecisionPlan:
    qs = questions or {"a": NOUL, "b": CHOICE}
    return plan_decision(parse_decision({"id": "dec-1", "state": "s", "questions": qs}),
                         settings, tok)


def result_for(plan: DecisionPlan, request: ReadRequest, p_first: float) -> ReadResult:
    rows = {}
    for slot in plan.units[request.unit].slots:
        k = len(slot.label_ids)
        probs = [p_first] + [(1 - p_first) / (k - 1)] * (k - 1)
        lps = {i: math.log(max(p, 1e-300)) for i, p in zip(slot.label_ids, probs, strict=True)}
        for also, p in zip(slot.also_ids, probs, strict=False):  # a label's other ids: less
            lps.update({i: math.log(max(p, 1e-300)) - 3.0 for i in also})
        top = max(lps, key=lambda i: lps[i])
        rows[slot.position] = SlotRow(logprobs=lps, argmax_id=top, argmax_logprob=lps[top])
    return ReadResult(rows=rows, prompt_tokens=40, cached_tokens=32, latency_ms=5.0)


def run(flow: DecisionFlow, plan: DecisionPlan, script: Script, limit: int = 50) -> int:
    rounds = 0
    while not flow.done:
        rounds += 1
        assert rounds <= limit
        for request in flow.next_requests():
            flow.record(request, result_for(plan, request, script(request.unit, request.draw)))
    return rounds


def test_near_certain_reads_stop_after_one_draw(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings()
    plan = plan_for(standin_tokenizer, settings)
    flow = DecisionFlow(plan, settings, vocab_size=standin_tokenizer.info.vocab_size)
    assert run(flow, plan, lambda unit, draw: 0.995) == 1
    answers = flow.answers()
    assert [a.question_id for a in answers] == ["a", "b"]
    assert [a.label for a in answers] == ["yes", "A"] and answers[1].option == "buyer"
    assert all(a.stop_reason is StopReason.NEAR_CERTAIN and a.draws == 1 for a in answers)
    assert flow.n_reads == 2 and flow.next_requests() == []
    records = flow.draws()
    assert [(r.unit, r.draw) for r in records] == [(0, 0), (1, 0)]
    assert records[0].prompt_tokens == 40 and records[0].cached_tokens == 32


@pytest.mark.parametrize(("script", "draws", "stop"), [
    (lambda u, d: [0.7, 0.65][d], 2, StopReason.AGREED),
    (lambda u, d: [0.7, 0.4, 0.55, 0.6][d], 4, StopReason.MAX_DRAWS),
    (lambda u, d: [0.7, 0.3, 0.62][d], 3, None),  # 3rd draw: spread 0.4 -> continue to 4
])
def test_agree_policy_draws(standin_tokenizer: HFTextTokenizer, script: Any, draws: int,
                            stop: StopReason | None) -> None:
    settings = ReadSettings()
    plan = plan_for(standin_tokenizer, settings, {"a": NOUL})
    flow = DecisionFlow(plan, settings, vocab_size=800)
    if stop is None:
        for _ in range(draws):
            (req,) = flow.next_requests()
            flow.record(req, result_for(plan, req, script(0, req.draw)))
        assert not flow.done and flow.next_requests()[0].draw == draws
        return
    run(flow, plan, script)
    (answer,) = flow.answers()
    assert (answer.draws, answer.stop_reason) == (draws, stop)


def test_units_stop_independently(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings()
    plan = plan_for(standin_tokenizer, settings)
    flow = DecisionFlow(plan, settings, vocab_size=800)
    run(flow, plan, lambda unit, draw: 0.995 if unit == 0 else [0.5, 0.55][draw])
    a, b = flow.answers()
    assert (a.draws, b.draws) == (1, 2) and flow.n_reads == 3


@pytest.mark.parametrize("policy", [PolicyName.FIXED, "fixed"])
def test_fixed_policy_draws_exactly_n(standin_tokenizer: HFTextTokenizer, policy: Any) -> None:
    settings = ReadSettings(policy=policy, fixed_draws=3)
    plan = plan_for(standin_tokenizer, settings, {"a": NOUL})
    flow = DecisionFlow(plan, settings, vocab_size=800)
    run(flow, plan, lambda unit, draw: 0.999)
    assert flow.answers()[0].draws == 3 and flow.answers()[0].stop_reason is StopReason.FIXED


def test_outstanding_requests_repeat_until_recorded(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings()
    plan = plan_for(standin_tokenizer, settings)
    flow = DecisionFlow(plan, settings, vocab_size=800)
    first = flow.next_requests()
    again = flow.next_requests()
    assert [encode_body(r.body) for r in first] == [encode_body(r.body) for r in again]
    flow.record(first[0], result_for(plan, first[0], 0.999))
    assert [r.unit for r in flow.next_requests()] == [1]


def test_malformed_result_leaves_the_flow_unchanged(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings()
    plan = plan_for(standin_tokenizer, settings, {"a": NOUL})
    flow = DecisionFlow(plan, settings, vocab_size=800)
    (req,) = flow.next_requests()
    slot = plan.units[0].slots[0]
    missing = f"no logprob row for slot position {slot.position} "
    with pytest.raises(MalformedResponse, match=missing):
        flow.record(req, ReadResult(rows={}))
    bad_row = SlotRow(logprobs={slot.label_ids[0]: -0.1}, argmax_id=1, argmax_logprob=-0.1)
    with pytest.raises(MalformedResponse, match="missing"):
        flow.record(req, ReadResult(rows={slot.position: bad_row}))
    assert flow.n_reads == 0 and flow.draws() == ()
    assert flow.next_requests() == [req]
    flow.record(req, result_for(plan, req, 0.999))
    assert flow.done


def test_misuse_is_a_runtime_error(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings()
    plan = plan_for(standin_tokenizer, settings, {"a": NOUL})
    flow = DecisionFlow(plan, settings, vocab_size=800)
    with pytest.raises(RuntimeError, match="before the flow is done"):
        flow.answers()
    (req,) = flow.next_requests()
    flow.record(req, result_for(plan, req, 0.5))
    with pytest.raises(RuntimeError, match="not outstanding"):
        flow.record(req, result_for(plan, req, 0.5))


def test_trivial_only_decision_is_done_without_reads(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings()
    plan = plan_for(standin_tokenizer, settings,
                    {"t": {"type": "score", "instructions": "?", "criteria": ["only"]}})
    flow = DecisionFlow(plan, settings, vocab_size=800)
    assert flow.done and flow.next_requests() == [] and flow.n_reads == 0
    (answer,) = flow.answers()
    assert answer.stop_reason is StopReason.TRIVIAL and answer.legend == {"0": "only"}


def test_seeds_follow_the_contract(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings(read_mode=ReadMode.JOINT, seed=7)
    plan = plan_for(standin_tokenizer, settings)
    (req,) = DecisionFlow(plan, settings, vocab_size=800, replicate=2).next_requests()
    assert req.seed == derive_seed(7, 2, "dec-1", "a,b", 0)
    (other,) = DecisionFlow(plan, settings, vocab_size=800, replicate=3).next_requests()
    assert other.seed != req.seed
    assert other.body["vllm_xargs"]["diffusion_seed_canvas"] != \
        req.body["vllm_xargs"]["diffusion_seed_canvas"]


def test_joint_flow_answers_every_question(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings(read_mode=ReadMode.JOINT)
    qs = {f"q{i}": NOUL for i in range(12)} | {"who": CHOICE}
    plan = plan_for(standin_tokenizer, settings, qs)
    flow = DecisionFlow(plan, settings, vocab_size=800)
    run(flow, plan, lambda unit, draw: 0.999)
    assert [a.question_id for a in flow.answers()] == list(qs)
    assert len(flow.draws()) == 13 and flow.n_reads == len(plan.units) == 1


@pytest.mark.parametrize("endpoint", list(Endpoint))
def test_probe_request(standin_tokenizer: HFTextTokenizer, endpoint: Endpoint) -> None:
    req = build_probe_request(ReadSettings(endpoint=endpoint), standin_tokenizer)
    assert req.endpoint is endpoint and len(req.slots) == 1 and len(req.logprob_ids) == 2
    assert encode_body(req.body) == encode_body(
        build_probe_request(ReadSettings(endpoint=endpoint), standin_tokenizer).body)
