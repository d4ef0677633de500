"""The simulator finds every answer slot dreads planned, whatever the noise, in both template
formats (lines up to 10 questions, indexed past), with either scaffold convention."""

from __future__ import annotations

import pytest

from app.engine import ReadMode, ReadSettings, parse_decision, plan_decision
from app.engine.wire import build_request
from app.upstream.sim.tokens import find_slots, load_sim_tokenizer
from app.upstream.tokenizer import HFTextTokenizer


@pytest.mark.parametrize("n_questions", [1, 4, 12])
@pytest.mark.parametrize("steps", [1, 2])
@pytest.mark.parametrize("tokenizer_fixture", ["standin_tokenizer", "thoughtless_tokenizer"])
def test_every_planned_slot_is_found(request: pytest.FixtureRequest, n_questions: int,
                                     steps: int, tokenizer_fixture: str) -> None:
    tokenizer: HFTextTokenizer = request.getfixturevalue(tokenizer_fixture)
    sim_tokenizer = load_sim_tokenizer("standin")
    questions = {f"id-{i}": {"type": "noul", "instructions": f"Is clause {i} void?"}
                 for i in range(n_questions)}
    settings = ReadSettings(read_mode=ReadMode.JOINT, steps=steps)
    plan = plan_decision(parse_decision({"id": "d", "state": "s", "questions": questions}),
                         settings, tokenizer)
    for unit in plan.units:
        planned = {slot.position: slot.canvas_id for slot in unit.slots}
        for draw in range(150):
            body = build_request(unit, settings, draw=draw, seed=draw * 7919 + 1,
                                 vocab_size=tokenizer.info.vocab_size).body
            xargs = body["vllm_xargs"]
            found = find_slots(sim_tokenizer, xargs["diffusion_seed_canvas"], body["max_tokens"],
                               xargs.get("diffusion_pinned"), set(planned.values()))
            assert found == planned, draw
