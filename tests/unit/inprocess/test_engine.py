"""TransformersUpstream: the Upstream Protocol over the tiny model, driven by DecisionFlow."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

pytest.importorskip("torch")

from app.engine import (
    Answer,
    DecisionFlow,
    PolicyName,
    ReadMode,
    ReadSettings,
    parse_decision,
    plan_decision,
)
from app.errors import UpstreamRejected
from app.inprocess import TransformersUpstream
from app.runs.answer import answer_decision

pytestmark = pytest.mark.engine

STATE = ("Clause 1.1: Neither party hires the other's staff during the agreement and for 18 "
         "months after it. Clause 2.2: Northwind Systems tells Acme Retail about any data breach "
         "within 168 hours of finding it.")
QUESTIONS = {
    "conflict": {"type": "noul", "instructions": "Do these two clauses contradict each other?"},
    "topic": {"type": "choice", "instructions": "Which subject does the first clause deal with?",
              "criteria": {"payment": "invoices", "staff": None, "liability": "damage caps"}},
    "severity": {"type": "score", "instructions": "How severe is a breach of clause 2.2?",
                 "criteria": ["minor", "serious", "critical"]},
}


def _decision_lines(n: int) -> list[dict[str, Any]]:
    return [{"id": f"d{i}", "state": f"{STATE} (copy {i})", "questions": QUESTIONS}
            for i in range(n)]


async def _answer(upstream: Any, tokenizer: Any, settings: ReadSettings,
                  line: dict[str, Any]) -> tuple[Answer, ...]:
    decided = await answer_decision(parse_decision(line, line_no=1), settings, tokenizer,
                                    upstream)
    return decided.answers


def _answer_all(upstream: Any, tokenizer: Any, settings: ReadSettings,
                lines: list[dict[str, Any]]) -> list[tuple[Answer, ...]]:
    async def main() -> list[tuple[Answer, ...]]:
        return list(await asyncio.gather(*(_answer(upstream, tokenizer, settings, line)
                                           for line in lines)))
    return asyncio.run(main())


def _probs(answers: tuple[Answer, ...]) -> list[float]:
    return [p for a in answers for p in a.probs.values()]


@pytest.mark.parametrize("mode", [ReadMode.ISOLATED, ReadMode.JOINT])
def test_decisions_read_in_one_batch_equal_decisions_read_alone(
        tiny_upstream: TransformersUpstream, standin_tokenizer: Any, mode: ReadMode) -> None:
    settings = ReadSettings(read_mode=mode, policy=PolicyName.FIXED, fixed_draws=2)
    together = _answer_all(tiny_upstream, standin_tokenizer, settings, _decision_lines(4))
    assert max(tiny_upstream.batcher.batch_sizes) > 2  # reads of several decisions gathered
    tiny_upstream.cache.clear()
    alone = _answer_all(tiny_upstream, standin_tokenizer, settings, _decision_lines(1))
    assert [a.label for a in together[0]] == [a.label for a in alone[0]]
    assert _probs(together[0]) == pytest.approx(_probs(alone[0]), abs=1e-5)
    assert all(a.draws == 2 for a in together[0])


def test_questions_of_a_state_share_its_prefill(tiny_upstream: TransformersUpstream,
                                                 standin_tokenizer: Any) -> None:
    """Isolated reads: the document prefix is encoded once; the answers do not change."""
    settings = ReadSettings(policy=PolicyName.FIXED, fixed_draws=1)
    shared = _answer_all(tiny_upstream, standin_tokenizer, settings, _decision_lines(1))
    stats = tiny_upstream.executor.last
    plain = TransformersUpstream.from_model(tiny_upstream.model, tokenizer=standin_tokenizer,
                                            name="tiny", flush_ms=2.0)
    plain.executor.min_shared_prefix = 10**9  # no prefix sharing
    unshared = _answer_all(plain, standin_tokenizer, settings, _decision_lines(1))
    plain.batcher.close()
    assert stats.prompts == 3
    assert stats.prefilled_tokens < plain.executor.last.prefilled_tokens * 0.6
    assert _probs(shared[0]) == pytest.approx(_probs(unshared[0]), abs=1e-5)


def test_the_same_request_gives_the_same_result(tiny_upstream: TransformersUpstream,
                                                standin_tokenizer: Any) -> None:
    settings = ReadSettings(policy=PolicyName.FIXED, fixed_draws=3)
    first = _answer_all(tiny_upstream, standin_tokenizer, settings, _decision_lines(1))
    again = _answer_all(tiny_upstream, standin_tokenizer, settings, _decision_lines(1))
    assert first == again
    assert len(set(_probs(first[0]))) > 3  # not a constant answer


def _request(upstream: TransformersUpstream, tokenizer: Any, **xargs: Any) -> Any:
    settings = ReadSettings()
    plan = plan_decision(parse_decision(_decision_lines(1)[0], line_no=1), settings, tokenizer)
    flow = DecisionFlow(plan, settings, vocab_size=tokenizer.info.vocab_size)
    request = flow.next_requests()[0]
    body = dict(request.body)
    body["vllm_xargs"] = {**body["vllm_xargs"], **xargs}
    return dataclasses.replace(request, body=body)


@pytest.mark.parametrize(("xargs", "words"), [
    ({"diffusion_canvas_length": 999}, "no larger than the served canvas"),
    ({"diffusion_seed_canvas": [0, 1]}, "diffusion_seed_canvas"),
    ({"diffusion_max_steps": 4}, "steps = 1"),
])
def test_requests_vllm_would_refuse_are_rejected_with_the_reason(
        tiny_upstream: TransformersUpstream, standin_tokenizer: Any, xargs: dict[str, Any],
        words: str) -> None:
    request = _request(tiny_upstream, standin_tokenizer, **xargs)
    with pytest.raises(UpstreamRejected, match=words):
        asyncio.run(tiny_upstream.read(request))


def test_fingerprint_names_the_engine(tiny_upstream: TransformersUpstream) -> None:
    fingerprint = asyncio.run(tiny_upstream.fingerprint())
    assert fingerprint.engine == "transformers"
    assert fingerprint.canvas_length == 320
    assert "transformers" in (fingerprint.version or "")


def test_a_cache_for_a_batch_of_prompts_encodes_each_prompt_once(
        tiny_read_model: Any, standin_tokenizer: Any) -> None:
    """A small card's prompt cache holds about one batch of prompts: a decision's later draws
    are read before new decisions are encoded, so no prompt is encoded twice for its draws
    (first come, first read would evict a prompt before its next draw comes round)."""
    settings = ReadSettings(read_mode=ReadMode.JOINT, policy=PolicyName.FIXED, fixed_draws=4)
    lines = _decision_lines(12)
    probe = TransformersUpstream.from_model(tiny_read_model, tokenizer=standin_tokenizer,
                                            name="tiny", flush_ms=2.0)
    _answer_all(probe, standin_tokenizer, settings, lines[:1])
    entry_bytes = probe.cache.bytes
    probe.batcher.close()

    small = TransformersUpstream.from_model(tiny_read_model, tokenizer=standin_tokenizer,
                                            name="tiny", flush_ms=50.0, max_batch=4,
                                            cache_bytes=int(entry_bytes * 4.5))
    answers = _answer_all(small, standin_tokenizer, settings, lines)
    small.batcher.close()
    assert all(a.draws == 4 for decided in answers for a in decided)
    assert small.cache.misses == len(lines)  # each prompt encoded once, for its first draw
    assert small.cache.hits == 3 * len(lines)


@pytest.mark.parametrize("mode", [ReadMode.ISOLATED, ReadMode.JOINT])
def test_the_planned_prompt_ids_are_the_engines_own_rendering(
        tiny_upstream: TransformersUpstream, standin_tokenizer: Any, mode: ReadMode) -> None:
    """The engine reads the planner's ids instead of rendering the body again: they are the
    ids it would render itself, for every read of a decision."""
    settings = ReadSettings(read_mode=mode)
    plan = plan_decision(parse_decision(_decision_lines(1)[0], line_no=1), settings,
                         standin_tokenizer)
    requests = DecisionFlow(plan, settings,
                            vocab_size=standin_tokenizer.info.vocab_size).next_requests()
    assert requests and all(r.prompt_ids for r in requests)
    for request in requests:
        rendered = tiny_upstream.job_for(dataclasses.replace(request, prompt_ids=()))
        assert tiny_upstream.job_for(request).prompt == rendered.prompt
