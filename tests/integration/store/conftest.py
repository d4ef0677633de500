"""The store tests' database: each test runs on PostgreSQL and on SQLite."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.store.db import make_engine, make_sessionmaker


@pytest.fixture(params=["postgresql", "sqlite"])
def factory(request: pytest.FixtureRequest,
            make_database: Callable[..., str]) -> Iterator[sessionmaker[Session]]:
    """A session factory on a fresh, migrated database of each kind."""
    engine = make_engine(make_database(request.param))
    yield make_sessionmaker(engine)
    engine.dispose()
