"""``run_chunk`` without Celery: the real client and simulator in this process (no socket:
``tests.fixtures.memory_upstream``) and the real store on SQLite.

Covers what a chunk does with each kind of decision: done and committed, a redelivered chunk as
a no-op, a template that cannot fit (rejected, message kept), the server refusing the request
(``bad_request``, rejected), and the server unreachable (transient, back to pending).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from sqlalchemy import select

from app.engine import ReadSettings, settings_hash, settings_to_dict
from app.runs.chunk import Answerers, ChunkPolicy, ChunkResult, Delivery, HandOff, run_chunk
from app.sim import SimApp
from app.store.db import session_scope
from app.store.models import Answer, Attempt, Decision
from app.store.runs import ensure_run, insert_decisions
from app.tokenizer.hf import load_tokenizer
from app.upstream.vllm import VllmUpstream
from tests.fixtures.job_rows import decision_rows
from tests.fixtures.memory_upstream import InMemoryUpstream, memory_sim
from tests.fixtures.run_store import RunStore
from tests.fixtures.services import free_port


@pytest.fixture
def stack(make_database: Callable[..., str]) -> Iterator[RunStore]:
    with RunStore.open(make_database("sqlite")) as opened:
        yield opened


def _write(stack: RunStore, n: int, settings: ReadSettings, name: str) -> list[int]:
    """Rows only (no broker): the ids of ``n`` decisions of a new run."""
    with session_scope(stack.factory) as s:
        run, _ = ensure_run(s, name=name, settings=settings_to_dict(settings),
                            settings_hash=settings_hash(settings), upstream=stack.upstream,
                            engine="vllm", source=None, replicates=1, fingerprint=None)
        stack.run_id = run.id
        return sorted(rid for rid, _ in insert_decisions(s, run.id, decision_rows(n)))


#: The chunk policy of these tests: leases that outlive them, 16 reads in flight.
POLICY = ChunkPolicy(lease_s=30, max_in_flight=16)


async def _run(stack: RunStore, ids: list[int], sim: SimApp | str | None = None,
               hand_off: HandOff | None = None) -> ChunkResult:
    """``ids`` read by ``sim`` (a simulator app in this process; a URL: over HTTP; None: one
    with default options)."""
    upstream = (VllmUpstream(sim, model="dgemma", canvas_length=320, retries=0)
                if isinstance(sim, str) else InMemoryUpstream(sim or memory_sim(), retries=0))
    try:
        return await run_chunk(stack.factory, stack.run_id, ids,
                               answerers=Answerers(upstream, load_tokenizer("standin")),
                               policy=POLICY, delivery=Delivery("test"), hand_off=hand_off)
    finally:
        await upstream.aclose()


def _statuses(stack: RunStore) -> list[str]:
    with session_scope(stack.factory) as s:
        return list(s.scalars(select(Decision.status).where(Decision.run_id == stack.run_id)))


async def test_chunk_commits_each_decision_and_a_redelivery_is_a_no_op(stack: RunStore) -> None:
    ids = _write(stack, 20, ReadSettings(), "ok")
    result = await _run(stack, ids)
    assert (result.claimed, result.done, result.won) == (20, 20, 20)
    assert set(_statuses(stack)) == {"done"}
    again = await _run(stack, ids)
    assert again.claimed == 0 and again.done == 0
    with session_scope(stack.factory) as s:
        assert len(s.scalars(select(Answer.id)).all()) == 20
        assert s.scalars(select(Attempt.outcome)).all() == ["ok"] * 20


async def test_template_too_wide_is_rejected_with_its_message(stack: RunStore) -> None:
    ids = _write(stack, 3, replace(ReadSettings(), canvas_length=2, canvas_step=2),
                 "narrow")
    result = await _run(stack, ids)
    assert result.rejected == 3 and result.failed == {"rejected": 3}
    with session_scope(stack.factory) as s:
        rows = s.execute(select(Decision.status, Decision.last_error)).all()
    assert {r.status for r in rows} == {"rejected"}
    assert all(r.last_error for r in rows)


async def test_server_refusal_is_permanent_and_unreachable_is_transient(
        stack: RunStore) -> None:
    short = memory_sim(max_model_len=64)  # refuses every prompt: 400 input_tokens
    ids = _write(stack, 4, ReadSettings(), "refused")
    result = await _run(stack, ids[:2], short)
    assert result.failed == {"bad_request": 2}
    dead = f"http://127.0.0.1:{free_port()}"
    result = await _run(stack, ids[2:], dead)
    assert result.failed == {"upstream_unreachable": 2}
    assert sorted(_statuses(stack)) == ["pending", "pending", "rejected", "rejected"]


def _fingerprinted(stack: RunStore, n: int, name: str, max_model_len: int) -> list[int]:
    ids = _write(stack, n, ReadSettings(), name)
    from app.store.runs import record_fingerprint

    with session_scope(stack.factory) as s:
        record_fingerprint(s, stack.run_id, {"engine": "sim", "model_id": "dgemma",
                                             "max_model_len": max_model_len, "version": None,
                                             "canvas_length": 320})
    return ids


async def test_a_prompt_past_the_servers_context_is_rejected_before_any_read(
        stack: RunStore) -> None:
    """vLLM would admit it, cut the canvas and answer rows that are not there."""
    sim = memory_sim(max_model_len=64)
    ids = _fingerprinted(stack, 3, "long", 64)
    result = await _run(stack, ids, sim)
    assert result.rejected == 3
    with session_scope(stack.factory) as s:
        reasons = s.scalars(select(Decision.last_error)).all()
    assert all("more than the server's max_model_len 64" in r for r in reasons)
    assert all(" tokens (thought block included) and its canvas 16: " in r for r in reasons)
    assert sim.stats()["requests"] == 0


async def test_a_refused_api_key_puts_decisions_back_uncharged(
        stack: RunStore) -> None:
    """A 401 is the worker's configuration: not retried, no decision failed or charged."""
    sim = memory_sim(api_key="the-right-key")
    ids = _write(stack, 4, ReadSettings(), "keyed")
    result = await _run(stack, ids, sim)
    assert result.failed == {"unauthorized": 4}
    assert "DREADS_UPSTREAM_API_KEY" in result.not_served
    with session_scope(stack.factory) as s:
        rows = s.execute(select(Decision.status, Decision.attempts)).all()
    assert {(r.status, r.attempts) for r in rows} == {("pending", 0)}
    assert sim.stats()["unauthorized"] == 4
    keyed = InMemoryUpstream(sim, api_key="the-right-key")
    try:
        done = await run_chunk(stack.factory, stack.run_id, ids,
                               answerers=Answerers(keyed, load_tokenizer("standin")),
                               policy=POLICY, delivery=Delivery("test"))
    finally:
        await keyed.aclose()
    assert done.done == 4 and set(_statuses(stack)) == {"done"}


async def test_the_hand_off_comes_once_when_only_the_slowest_decisions_run(
        stack: RunStore) -> None:
    """A chunk calls its hand-off once, while its last decisions (no more than
    ``HandOff.at``) still run, before it ends; they then end done like the others."""
    sim = memory_sim(step_ms=20, max_batch=4)  # a few reads per step: decisions end in turns
    ids = _write(stack, 16, ReadSettings(), "handoff")
    seen: list[int] = []

    def hand_off() -> None:
        seen.append(_statuses(stack).count("done"))

    result = await _run(stack, ids, sim, hand_off=HandOff(8, hand_off))
    assert len(seen) == 1, "called once"
    assert 8 <= seen[0] < 16, "after half of the decisions, before the last"
    assert result.done == 16 and set(_statuses(stack)) == {"done"}


async def test_no_hand_off_after_the_upstream_failed(stack: RunStore) -> None:
    """A chunk that met a failing upstream never hands off: the worker must not take more
    work from the queue while its model server is down."""
    ids = _write(stack, 6, ReadSettings(), "down")
    called: list[bool] = []
    result = await _run(stack, ids, f"http://127.0.0.1:{free_port()}",
                        hand_off=HandOff(3, lambda: called.append(True)))
    assert result.failed == {"upstream_unreachable": 6}
    assert called == []


async def test_decisions_that_finish_together_share_one_commit(stack: RunStore) -> None:
    """Group commit: the decisions that finish while a transaction is being written go in
    the next one (their attempts carry that transaction's one timestamp), and every
    decision is still recorded once, with its own answers and draws."""
    ids = _write(stack, 48, ReadSettings(), "group")
    result = await _run(stack, ids)
    assert result.done == 48
    with session_scope(stack.factory) as s:
        ended = s.scalars(select(Attempt.ended_at)).all()
        answered = s.scalars(select(Answer.decision_id)).all()
    assert len(ended) == 48 and sorted(answered) == sorted(ids)
    assert len(set(ended)) < 48, "some decisions were committed together"
