"""The migrations on real PostgreSQL and SQLite: the schema they build is the models' own, and
a store made by an earlier version keeps its data through an upgrade (and a downgrade)."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.migrate import alembic_config, upgrade
from app.store.models import Base
from app.store.views import question_ids

KINDS = ["postgresql", "sqlite"]


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, make_database: Callable[..., str]) -> str:
    return make_database(request.param)


def test_the_migrated_schema_is_the_models_schema(url: str) -> None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


_PAYLOADS = [{"state": f"s{i}", "questions": {f"q{i}": {"type": "noul", "instructions": "ok?"}},
              "expected": {}} for i in range(3)]


def test_payloads_move_to_their_own_table_and_back(url: str) -> None:
    """0004 moves every decision's payload out of ``decisions`` into ``decision_payloads``;
    its downgrade puts them back."""
    command.downgrade(alembic_config(url), "0003")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO runs (name, status, settings, settings_hash, upstream, engine, "
                "replicates) VALUES ('old', 'active', '{}', 'h', 'sim', 'vllm', 1)"))
            run_id = conn.execute(text("SELECT id FROM runs")).scalar_one()
            for i, payload in enumerate(_PAYLOADS):
                conn.execute(text(
                    "INSERT INTO decisions (run_id, key, replicate, payload, n_questions, "
                    "status, attempts, updated_at) VALUES (:run, :key, 0, :payload, 1, "
                    "'done', 1, CURRENT_TIMESTAMP)"),
                    {"run": run_id, "key": f"d{i}", "payload": orjson.dumps(payload).decode()})
        upgrade(url)
        assert "payload" not in {c["name"] for c in inspect(engine).get_columns("decisions")}
        with session_scope(make_sessionmaker(engine)) as session:
            assert question_ids(session, run_id) == ["q0", "q1", "q2"]
        command.downgrade(alembic_config(url), "0003")
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT key, payload FROM decisions ORDER BY id")).all()
        assert [(key, _loaded(p)) for key, p in rows] == [
            (f"d{i}", payload) for i, payload in enumerate(_PAYLOADS)]
        upgrade(url)
    finally:
        engine.dispose()


def _loaded(value: object) -> object:
    return orjson.loads(value) if isinstance(value, str | bytes) else value
