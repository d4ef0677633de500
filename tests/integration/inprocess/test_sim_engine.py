"""``dreads sim --engine transformers --model DIR`` over real HTTP with the VllmUpstream client
answers a decision exactly as the in-process engine does."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from app.engine import Answer, PolicyName, ReadMode, ReadSettings, parse_decision
from app.inprocess import TransformersUpstream
from app.runs.answer import answer_decision
from app.sim import SimOptions, start_sim_thread
from app.tokenizer.hf import load_tokenizer
from app.upstream.vllm import VllmUpstream

pytestmark = pytest.mark.engine

LINE = {
    "id": "C1|plain|1.1x2.2",
    "state": "Clause 1.1: Neither party hires the other's staff during the agreement and for 18 "
             "months after it. Clause 2.2: Northwind Systems tells Acme Retail about any data "
             "breach within 168 hours of finding it.",
    "questions": {
        "conflict": {"type": "noul", "instructions": "Do these two clauses contradict each other?"},
        "topic": {"type": "choice", "instructions": "Which subject does clause 1.1 deal with?",
                  "criteria": {"payment": None, "staff": None, "confidentiality": None}},
    },
}


async def _decide(upstream: Any, settings: ReadSettings, tokenizer: Any) -> tuple[Answer, ...]:
    try:
        decided = await answer_decision(parse_decision(LINE, line_no=1), settings, tokenizer,
                                        upstream)
    finally:
        await upstream.aclose()
    return decided.answers


@pytest.mark.parametrize("mode", [ReadMode.ISOLATED, ReadMode.JOINT])
def test_a_decision_through_the_sim_equals_the_engine(tiny_model_dir: Path,
                                                      mode: ReadMode) -> None:
    path = str(tiny_model_dir)
    tokenizer = load_tokenizer(path)
    settings = ReadSettings(model=path, read_mode=mode, policy=PolicyName.FIXED, fixed_draws=2)
    engine = TransformersUpstream(path, tokenizer=tokenizer, dtype="float32")
    direct = asyncio.run(_decide(engine, settings, tokenizer))

    handle = start_sim_thread(SimOptions(model=path, engine_model=path, engine_dtype="float32"))
    client = VllmUpstream(handle.url, model=path, canvas_length=settings.canvas_length,
                          engine="sim", on_close=handle.stop, retries=0, timeout_s=60.0)
    via_http = asyncio.run(_decide(client, settings, tokenizer))

    assert [a.label for a in via_http] == [a.label for a in direct]
    for a, b in zip(via_http, direct, strict=True):
        assert a.probs == pytest.approx(b.probs, abs=1e-5)
        assert a.label_mass == pytest.approx(b.label_mass, abs=1e-5)
        assert a.argmax_is_label == b.argmax_is_label
