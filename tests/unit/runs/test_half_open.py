"""``dreads run``'s half-open wait (``app.runs.half_open.wait_half_open``), with the simulator
in-process and the real store on SQLite: a run the breaker paused is probed each interval and
resumes once its server answers, saying so; a budget pause is not waited on; a give-up time
leaves it paused."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from app.runs.breaker import BreakerPolicy
from app.runs.half_open import wait_half_open
from app.sim import SimApp
from app.store.breaker import pause_run
from app.store.db import session_scope
from app.store.models import Run
from app.store.queue import utcnow
from app.store.records import RunInfo
from app.store.runs import find_run
from tests.fixtures.memory_upstream import InMemoryUpstream, memory_sim
from tests.fixtures.run_store import RunStore


@pytest.fixture
def store(make_database: Callable[..., str]) -> Iterator[RunStore]:
    with RunStore.open(make_database("sqlite")) as opened:
        yield opened


def _paused(store: RunStore, kind: str = "breaker") -> RunInfo:
    with session_scope(store.factory) as s:
        run = Run(name="r", settings={}, settings_hash="h", upstream="http://m:8001")
        s.add(run)
        s.flush()
        assert pause_run(s, run.id, kind=kind, reason="50 of the last 50 attempts failed",
                         now=utcnow() - timedelta(seconds=2))
    with session_scope(store.factory) as s:
        info = find_run(s, "r")
        assert info is not None
        return info


def _status(store: RunStore) -> tuple[str, str | None]:
    with session_scope(store.factory) as s:
        info = find_run(s, "r")
        assert info is not None
        return info.status, info.pause_kind


async def _wait(store: RunStore, sim: SimApp, policy: BreakerPolicy,
                run: RunInfo) -> tuple[bool, list[str]]:
    lines: list[str] = []
    upstream = InMemoryUpstream(sim)
    try:
        resumed = await wait_half_open(store.factory, run, upstream, None, policy,
                                       notify=lines.append)
    finally:
        await upstream.aclose()
    return resumed, lines


async def test_a_paused_run_resumes_once_its_server_answers(store: RunStore) -> None:
    run = _paused(store)
    sim = memory_sim()
    sim.faults.down(1.0)
    resumed, lines = await _wait(store, sim, BreakerPolicy(probe_s=0.3), run)
    assert resumed
    assert lines[0].startswith("run r paused: server unreachable since ")
    assert lines[0].endswith(", probing every 0.3 s")
    assert re.fullmatch(r"run r resumed at \d\d:\d\d:\d\d after \d+ s \(its server "
                        r"answered a probe read\)", lines[-1]), lines
    assert len(lines) == 2  # one line per change, not one per probe
    assert _status(store) == ("active", None)


async def test_a_budget_pause_is_not_waited_on(store: RunStore) -> None:
    run = _paused(store, kind="budget")
    resumed, lines = await _wait(store, memory_sim(), BreakerPolicy(probe_s=0.1), run)
    assert (resumed, lines) == (False, [])
    assert _status(store) == ("paused", "budget")


async def test_probes_off_leave_the_run_paused(store: RunStore) -> None:
    run = _paused(store)
    resumed, lines = await _wait(store, memory_sim(), BreakerPolicy(probe_s=0), run)
    assert (resumed, lines) == (False, [])
    assert _status(store) == ("paused", "breaker")


async def test_a_give_up_time_leaves_it_paused(store: RunStore) -> None:
    run = _paused(store)
    sim = memory_sim()
    sim.faults.down(3600)
    resumed, lines = await _wait(store, sim, BreakerPolicy(probe_s=0.3, give_up_s=3), run)
    assert not resumed
    assert lines[0].endswith("probing every 0.3 s, for at most 3 s")
    assert lines[-1] == ("run r: no answer from its server within 3 s "
                         "(DREADS_BREAKER_GIVE_UP_S): it stays paused")
    assert _status(store) == ("paused", "breaker")


async def test_a_probe_another_prober_took_this_interval_is_not_made_again(
        store: RunStore) -> None:
    """A worker's prober that keeps taking the run's probe (and finds its server down) leaves
    ``dreads run`` nothing to probe: the run is probed once an interval, by one of them."""
    import asyncio

    from app.store.breaker import take_probe

    run = _paused(store)
    taking = True

    async def worker_prober() -> None:
        while taking:
            with session_scope(store.factory) as s:
                take_probe(s, run.id, now=utcnow(), interval_s=0.1, give_up_s=None)
            await asyncio.sleep(0.05)

    prober = asyncio.create_task(worker_prober())
    waiting = asyncio.create_task(_wait(store, memory_sim(), BreakerPolicy(probe_s=0.3), run))
    await asyncio.sleep(1.5)  # the server answers, but every probe is the other prober's
    assert not waiting.done() and _status(store) == ("paused", "breaker")
    taking = False
    await prober
    resumed, lines = await asyncio.wait_for(waiting, 10)
    assert resumed and lines[-1].startswith("run r resumed at ")
