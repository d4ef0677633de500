"""The micro-batcher, the prefill cache and the batch planner, without a model forward."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

torch = pytest.importorskip("torch")

from app.inprocess.batcher import MicroBatcher  # noqa: E402
from app.inprocess.executor import shared_prefix_groups  # noqa: E402
from app.inprocess.kv import KVEntry  # noqa: E402
from app.inprocess.prefill_cache import PrefillCache  # noqa: E402

pytestmark = pytest.mark.engine


class _Recorder:
    """A batch function that records each batch and the thread it ran on."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.threads: set[str] = set()

    def __call__(self, jobs: Sequence[int]) -> list[int]:
        self.batches.append(list(jobs))
        self.threads.add(threading.current_thread().name)
        time.sleep(0.02)  # a forward: reads arriving meanwhile wait for the next batch
        return [j * 10 for j in jobs]


def test_concurrent_reads_are_gathered_up_to_max_batch() -> None:
    recorder = _Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(recorder, max_batch=4, flush_ms=50.0)

    async def main() -> list[int]:
        results = await asyncio.gather(*(batcher.submit(i) for i in range(10)))
        await batcher.aclose()
        return list(results)

    assert asyncio.run(main()) == [i * 10 for i in range(10)]
    assert [len(b) for b in recorder.batches] == [4, 4, 2]
    assert sorted(j for b in recorder.batches for j in b) == list(range(10))
    assert recorder.threads and threading.main_thread().name not in recorder.threads


def test_a_lone_read_goes_after_flush_ms() -> None:
    recorder = _Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(recorder, max_batch=64, flush_ms=5.0)

    async def main() -> float:
        started = time.perf_counter()
        assert await batcher.submit(7) == 70
        elapsed = time.perf_counter() - started
        await batcher.aclose()
        return elapsed

    assert asyncio.run(main()) < 2.0
    assert recorder.batches == [[7]]


def test_a_failed_batch_fails_each_of_its_reads() -> None:
    def broken(jobs: Sequence[int]) -> list[int]:
        raise RuntimeError("forward failed")

    batcher: MicroBatcher[int, int] = MicroBatcher(broken, max_batch=8, flush_ms=1.0)

    async def main() -> list[BaseException | int]:
        out = await asyncio.gather(*(batcher.submit(i) for i in range(3)),
                                   return_exceptions=True)
        await batcher.aclose()
        return list(out)

    assert all(isinstance(r, RuntimeError) for r in asyncio.run(main()))


def _entry(tokens: int) -> KVEntry:
    tensor = torch.zeros((1, 1, tokens, 4), dtype=torch.float32)  # 16 bytes per token
    return KVEntry(tokens, ((tensor, tensor.clone()),))


def test_prefill_cache_evicts_least_recently_used_by_bytes() -> None:
    cache = PrefillCache(max_bytes=3 * 32 * 10)  # room for three 10-token entries
    for first in (1, 2, 3):
        cache.put((first,) * 10, _entry(10))
    assert cache.get((1,) * 10) is not None  # 1 is now the most recent
    cache.put((4,) * 10, _entry(10))
    assert (2,) * 10 not in cache
    assert all(key in cache for key in ((1,) * 10, (3,) * 10, (4,) * 10))
    assert cache.bytes == 3 * 32 * 10
    cache.put((5,) * 100, _entry(100))  # larger than the whole cache: not kept
    assert (5,) * 100 not in cache


def test_prefill_cache_finds_the_longest_cached_prefix() -> None:
    cache = PrefillCache(max_bytes=1 << 20)
    short, long = _entry(3), _entry(5)
    cache.put((1, 2, 3), short)
    cache.put((1, 2, 3, 4, 5), long)
    assert cache.longest_prefix((1, 2, 3, 4, 5, 6)) is long
    assert cache.longest_prefix((1, 2, 3, 9)) is short
    assert cache.longest_prefix((1, 2, 3, 4, 5)) is short  # a proper prefix only
    assert cache.longest_prefix((1, 2, 3, 9), min_len=4) is None


def test_prompts_of_one_document_form_a_group() -> None:
    system = tuple(range(10))
    doc_a, doc_b = tuple(range(100, 160)), tuple(range(200, 260))
    prompts = [system + doc_a + (900 + q,) * 5 for q in range(3)]
    prompts += [system + doc_b + (900 + q,) * 5 for q in range(2)]
    prompts.append(system + (7,) * 40)
    groups = shared_prefix_groups(prompts, min_tokens=8, share=0.5)
    shared = sorted((n, len(members)) for n, members in groups if n)
    assert shared == [(70, 2), (70, 3)]
    assert groups[-1] == (0, [system + (7,) * 40])


def test_jobs_first_holds_true_for_go_before_earlier_ones() -> None:
    """The engine's later draws (prompt cached) are taken before new decisions' first reads."""
    recorder = _Recorder()
    started, queued = threading.Event(), threading.Event()

    def run_batch(jobs: Sequence[int]) -> list[int]:
        if jobs == [0]:  # the batch running while the others queue
            started.set()
            queued.wait(5)
        return recorder(jobs)

    batcher: MicroBatcher[int, int] = MicroBatcher(run_batch, max_batch=3, flush_ms=1.0,
                                                   first=lambda j: j >= 100)

    async def main() -> None:
        running = asyncio.ensure_future(batcher.submit(0))
        await asyncio.to_thread(started.wait, 5)
        rest = [asyncio.ensure_future(batcher.submit(j))
                for j in (1, 2, 101, 3, 102, 4, 103, 104)]
        await asyncio.sleep(0.01)
        queued.set()
        await asyncio.gather(running, *rest)
        await batcher.aclose()

    asyncio.run(main())
    assert recorder.batches == [[0], [101, 102, 103], [104, 1, 2], [3, 4]]


def test_waiting_jobs_run_while_the_event_loop_is_busy() -> None:
    """The engine's thread takes the next batch itself: the GPU reads the reads already waiting
    while the event loop plans and tokenizes (here: blocks for 0.5 s)."""
    recorder = _Recorder()
    started: list[float] = []

    def run_batch(jobs: Sequence[int]) -> list[int]:
        started.append(time.perf_counter())
        return recorder(jobs)

    batcher: MicroBatcher[int, int] = MicroBatcher(run_batch, max_batch=2, flush_ms=1.0)

    async def main() -> float:
        tasks = [asyncio.ensure_future(batcher.submit(j)) for j in range(6)]
        for _ in range(3):  # the submits run, then their turn's jobs go to the thread
            await asyncio.sleep(0)
        time.sleep(0.5)  # the loop busy: planning the next decisions
        freed = time.perf_counter()
        assert await asyncio.gather(*tasks) == [j * 10 for j in range(6)]
        await batcher.aclose()
        return freed

    freed = asyncio.run(main())
    assert len(started) == 3 and all(t < freed for t in started)
