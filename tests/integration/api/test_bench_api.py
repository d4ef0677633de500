"""The API benchmark runs end to end (a tiny run: the figures are for
``python bench/api_systemone.py``)."""

from __future__ import annotations

from tests.fixtures.bench import load_bench


def test_bench_measures_the_api_and_the_in_process_path() -> None:
    figures = load_bench("api_systemone").run(40, [1, 4])
    assert [(f.path.split()[0], f.in_flight) for f in figures] == [
        ("HTTP", 1), ("HTTP", 4), ("in-process", 1), ("in-process", 4)]
    assert all(f.requests == 40 and len(f.latencies_ms) == 40 and f.cpu_s > 0
               for f in figures)
