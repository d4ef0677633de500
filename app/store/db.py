"""Engines and sessions. Engines are made per process (never at import; never across a fork).

``session_scope`` is the one transaction boundary: it commits, rolls back, and turns the
database's errors into ``StoreError`` (``app.store.errors``). Store functions take its session
and never commit; the entry point or the runs layer opens the scope.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.store import dialects
from app.store.errors import database_errors, opening_errors, other_database
from app.store.urls import database_url, normalize_url

__all__ = ["check_supported", "disposing", "make_engine", "make_sessionmaker", "normalize_url",
           "session_scope"]


def make_engine(url: str, *, pool_size: int = 5) -> Engine:
    """An engine for ``url`` (a SQLAlchemy URL, or a SQLite file path).

    Raises:
        StoreError: the URL does not parse, or names a database dreads cannot use.
    """
    url = database_url(url)
    check_supported(url)
    with opening_errors(url):
        return _create(url, pool_size)


_SUPPORTED = ("postgresql", "sqlite")


def check_supported(url: str) -> None:
    """Refuse a database other than PostgreSQL and SQLite before trying its driver.

    Raises:
        BadDatabaseUrl: what to use instead.
    """
    scheme = url.split(":", 1)[0]
    if ":" in url and scheme.split("+", 1)[0] not in _SUPPORTED:
        raise other_database(scheme)


def _create(url: str, pool_size: int) -> Engine:
    return dialects.create_engine_for(url, pool_size=pool_size)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session], *, what: str = "") -> Iterator[Session]:
    """The boundary owns the transaction: commit on success, roll back on error. A failure of
    the database becomes one ``StoreError`` line (beginning with ``what`` when given).

    Raises:
        StoreError: the database failed a statement or the commit, or cannot be reached.
    """
    session = factory()
    try:
        with database_errors(factory.kw.get("bind"), what):
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise
    finally:
        session.close()


@contextmanager
def disposing(factory: sessionmaker[Session]) -> Iterator[sessionmaker[Session]]:
    """Yield ``factory``; dispose its engine (and pooled connections) on exit."""
    try:
        yield factory
    finally:
        bind = factory.kw.get("bind")
        if bind is not None:
            bind.dispose()
