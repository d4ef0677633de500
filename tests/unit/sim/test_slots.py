"""The simulator finds every answer slot dreads planned, whatever the noise: in every layout
(vLLM's reader: the reply's first token or numbered lines; dreads' own: ``q<k>:`` lines up to
10 questions, indexed past), for yes/no and digit labels, with the stand-in, a template that
does not write the thought block, and Gemma's real vocabulary (where a digit label follows a
lone ``▁`` and must not be mistaken for it)."""

from __future__ import annotations

import pytest

from app.engine import Layout, ReadMode, ReadSettings, parse_decision, plan_decision
from app.engine.wire import build_request
from app.sim.prompts import understand
from app.sim.tokens import SimTokenizer, find_slots
from app.tokenizer.hf import HFTextTokenizer

SCORE = ["none", "low", "some", "high", "severe"]


def _questions(n: int) -> dict[str, dict[str, object]]:
    return {f"id-{i}": ({"type": "noul", "instructions": f"Is clause {i} void?"} if i % 2 == 0
                        else {"type": "score", "instructions": f"How risky is {i}?",
                              "criteria": SCORE})
            for i in range(n)}


@pytest.mark.parametrize("n_questions", [1, 4, 12])
@pytest.mark.parametrize("layout", [Layout.VLLM, Layout.DOCUMENT_FIRST])
@pytest.mark.parametrize("tokenizer_fixture",
                         ["standin_tokenizer", "thoughtless_tokenizer", "approx_tokenizer"])
def test_every_planned_slot_is_found(request: pytest.FixtureRequest, n_questions: int,
                                     layout: Layout, tokenizer_fixture: str) -> None:
    tokenizer: HFTextTokenizer = request.getfixturevalue(tokenizer_fixture)
    sim_tokenizer = SimTokenizer(tokenizer)
    for steps in (1, 2):
        settings = ReadSettings(read_mode=ReadMode.JOINT, steps=steps, layout=layout)
        decision = parse_decision({"id": "d", "state": "s", "questions": _questions(n_questions)})
        for unit in plan_decision(decision, settings, tokenizer).units:
            prompt = understand(tuple((m["role"], m["content"]) for m in unit.messages))
            planned = {slot.position: slot.canvas_id for slot in unit.slots}
            if prompt.reply_slot:
                planned = {p: "" for p in planned}
            for draw in range(60):
                body = build_request(unit, settings, draw=draw, seed=draw * 7919 + 1,
                                     vocab_size=tokenizer.info.vocab_size).body
                xargs = body["vllm_xargs"]
                found = find_slots(sim_tokenizer, xargs["diffusion_seed_canvas"],
                                   body["max_tokens"], xargs.get("diffusion_pinned"),
                                   set(prompt.questions) or None, reply_slot=prompt.reply_slot)
                assert found == planned, (draw, steps)
