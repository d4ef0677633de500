"""The client-CPU benchmark runs end to end (a tiny run: the figures themselves are for
``python bench/client_cpu.py``)."""

from __future__ import annotations

from tests.fixtures.bench import load_bench


def test_bench_measures_both_clients_against_a_sim_subprocess() -> None:
    figures = load_bench("client_cpu").run(40, [1, 8], ["aiohttp", "httpx"])
    assert [(f.client.split()[0], f.in_flight) for f in figures] == [
        ("VllmUpstream", 1), ("VllmUpstream", 8), ("httpx", 1), ("httpx", 8)]
    assert all(f.reads == 40 and f.cpu_ms_per_read > 0 and f.reads_per_s > 0 for f in figures)
