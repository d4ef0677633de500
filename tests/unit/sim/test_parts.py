"""The simulator's parts: fault plan, GPU batch model, prefix-cache accounting."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.sim.capacity import BatchModel
from app.sim.faults import FaultPlan, FaultRates
from app.sim.tokens import PrefixCache


def test_a_fault_strikes_the_first_delivery_of_a_body_only() -> None:
    plan = FaultPlan(FaultRates(fail=1.0))
    assert plan.draw(b'{"a":1}') == "fail"
    assert plan.draw(b'{"a":1}') is None
    assert plan.draw(b'{"a":2}') == "fail"
    assert plan.injected["fail"] == 2


def test_fault_draws_are_deterministic_and_near_the_rate() -> None:
    bodies = [f'{{"n":{i}}}'.encode() for i in range(2000)]
    first = [FaultPlan(FaultRates(fail=0.2, hang=0.1), seed=7).draw(b) for b in bodies]
    again = [FaultPlan(FaultRates(fail=0.2, hang=0.1), seed=7).draw(b) for b in bodies]
    assert first == again
    assert 0.15 < first.count("fail") / len(bodies) < 0.25
    assert 0.06 < first.count("hang") / len(bodies) < 0.14


def test_low_mass_strikes_every_delivery() -> None:
    plan = FaultPlan(FaultRates(low_mass=1.0))
    assert [plan.draw(b"x") for _ in range(3)] == ["low_mass"] * 3


def test_rates_above_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 1"):
        FaultPlan(FaultRates(fail=0.7, hang=0.7))


async def test_batch_model_serves_max_batch_per_step() -> None:
    model = BatchModel(step_ms=50, max_batch=4)
    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(model.admit() for _ in range(8))), timeout=5)
    elapsed = time.perf_counter() - started
    await model.aclose()
    assert model.steps == 2
    assert 0.09 < elapsed < 0.3


async def test_batch_model_with_zero_step_answers_at_once() -> None:
    model = BatchModel(step_ms=0, max_batch=1)
    await asyncio.wait_for(asyncio.gather(*(model.admit() for _ in range(100))), timeout=1)
    assert model.steps == 0


def test_prefix_cache_counts_whole_blocks_of_a_shared_prefix() -> None:
    cache = PrefixCache()
    prompt = list(range(100))
    assert cache.lookup_and_insert(prompt) == 0
    assert cache.lookup_and_insert(prompt) == 96
    # shares the first 40 tokens: two whole blocks
    assert cache.lookup_and_insert([*range(40), *range(1000, 1060)]) == 32
    assert cache.lookup_and_insert([7, *range(99)]) == 0


def test_prefix_cache_is_bounded() -> None:
    cache = PrefixCache(max_blocks=4)
    cache.lookup_and_insert(list(range(64)))
    cache.lookup_and_insert(list(range(1000, 1064)))
    assert cache.lookup_and_insert(list(range(64))) == 0
