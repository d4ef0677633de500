"""``DecisionFlow`` driven against the simulator: the agree policy stops at 1, at 2 and at
max_draws in cases built for each (answer key, separation and noise chosen per case)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from app.engine import Answer, ReadSettings, StopReason
from app.tokenizer.hf import HFTextTokenizer
from app.upstream.vllm import VllmUpstream
from tests.fixtures.sim import MakeSim
from tests.integration.upstream.conftest import NOUL, decision_obj, flow


def _key(tmp_path: Path, label: str) -> str:
    obj = decision_obj(0)
    path = tmp_path / "key.jsonl"
    path.write_bytes(orjson.dumps({"state": obj["state"], "question": NOUL["instructions"],
                                   "label": label}) + b"\n")
    return str(path)


async def _answer(url: str, tokenizer: HFTextTokenizer, settings: ReadSettings) -> Answer:
    upstream = VllmUpstream(url, model="dgemma", canvas_length=320)
    f = flow(tokenizer, decision_obj(0), settings)
    try:
        for _ in range(settings.max_draws + 1):
            if f.done:
                break
            requests = f.next_requests()
            results = await asyncio.gather(*map(upstream.read, requests))
            for req, res in zip(requests, results, strict=True):
                f.record(req, res)
    finally:
        await upstream.aclose()
    assert f.done
    (answer,) = f.answers()
    return answer


@pytest.mark.parametrize(
    ("case", "sim_options", "draws", "stop"),
    [
        ("clear answer: near-certain first draw", {"separation": 8.0, "noise": 0.1}, 1,
         StopReason.NEAR_CERTAIN),
        ("unsure but steady: two agreeing draws", {"separation": 0.5, "noise": 0.0}, 2,
         StopReason.AGREED),
        ("noisy: draws never agree", {"separation": 0.0, "noise": 4.0}, 4,
         StopReason.MAX_DRAWS),
    ],
    ids=["stop-at-1", "stop-at-2", "stop-at-max"],
)
async def test_agree_policy_stops_where_the_reads_say(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer, tmp_path: Path, case: str,
        sim_options: dict[str, float], draws: int, stop: StopReason) -> None:
    sim = make_sim(key_path=_key(tmp_path, "yes"), **sim_options)
    answer = await _answer(sim.url, standin_tokenizer, ReadSettings(max_draws=4))
    assert (answer.draws, answer.stop_reason) == (draws, stop), case
    assert sim.stats()["reads"] == draws


async def test_low_mass_reads_show_in_the_answer(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim(low_mass_rate=1.0)
    answer = await _answer(sim.url, standin_tokenizer, ReadSettings())
    assert answer.label_mass < 0.2
    assert not answer.argmax_is_label
