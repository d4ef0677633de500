"""The per-run gauges cost one SQL round per TTL, however often Prometheus scrapes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from app.engine import ReadSettings, settings_hash, settings_to_dict
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.runs import DecisionRow, ensure_run, insert_decisions
from app.telemetry import RunMetrics
from tests.integration.telemetry.scrape import Samples


def _add(factory, name: str, n: int, start: int = 0) -> None:  # type: ignore[no-untyped-def]
    settings = ReadSettings()
    with session_scope(factory) as s:
        run, _ = ensure_run(s, name=name, settings=settings_to_dict(settings),
                            settings_hash=settings_hash(settings), upstream="sim",
                            engine="vllm", source="t.jsonl", replicates=1, fingerprint=None)
        insert_decisions(s, run.id, [
            DecisionRow(key=f"d{i}", replicate=0, cell=f"c{i % 2}", line_no=i + 1,
                        payload={"questions": {}}, n_questions=1)
            for i in range(start, start + n)])


def test_scrapes_within_the_ttl_share_one_query_round(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    factory = make_sessionmaker(engine)
    now = [0.0]
    collector = RunMetrics(factory, ttl_s=10.0, clock=lambda: now[0])
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        _add(factory, "cached", 4)
        first = Samples(generate_latest(registry).decode())
        assert first.by("dreads_run_decisions", "cell", run="cached") == {"c0": 2, "c1": 2}
        _add(factory, "cached", 2, start=4)
        now[0] = 9.0
        again = Samples(generate_latest(registry).decode())
        assert collector.rounds == 1, "a second scrape inside the TTL runs no query"
        assert again.total("dreads_run_decisions", run="cached") == 4
        now[0] = 10.5
        fresh = Samples(generate_latest(registry).decode())
        assert collector.rounds == 2
        assert fresh.by("dreads_run_decisions", "status", run="cached") == {"pending": 6}
        assert fresh.total("dreads_run_remaining_decisions", run="cached") == 6
    finally:
        engine.dispose()
