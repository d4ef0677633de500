"""The API benchmark runs end to end (a tiny run: the figures are for
``python bench/api_systemone.py``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "api_systemone.py"


def test_bench_measures_the_api_and_the_in_process_path() -> None:
    spec = importlib.util.spec_from_file_location("api_systemone", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["api_systemone"] = module
    spec.loader.exec_module(module)
    figures = module.run(40, [1, 4])
    assert [(f.path.split()[0], f.in_flight) for f in figures] == [
        ("HTTP", 1), ("HTTP", 4), ("in-process", 1), ("in-process", 4)]
    assert all(f.requests == 40 and len(f.latencies_ms) == 40 and f.cpu_s > 0
               for f in figures)
