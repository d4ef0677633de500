"""Engines and sessions. Engines are made per process (never at import; never across a fork).

Opening a database is the edge where SQLAlchemy's and the drivers' errors about the URL and the
server (a URL that does not parse, an unsupported scheme, a refused port, an unknown database,
a SQLite file in a missing directory) become one ``StoreError`` line (``opening_errors``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.orm import Session, sessionmaker

from app.errors import BadDatabaseUrl, StoreError
from app.store import dialects
from app.store.urls import database_url, normalize_url, redacted, sqlite_path

__all__ = ["check_supported", "disposing", "make_engine", "make_sessionmaker", "normalize_url",
           "opening_errors", "session_scope"]

_CHECK = "check --database-url / DREADS_DATABASE_URL"


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
        raise _other_database(scheme)


def _other_database(scheme: str) -> BadDatabaseUrl:
    return BadDatabaseUrl(f"dreads stores runs in PostgreSQL or SQLite, not {scheme!r}; use "
                          "postgresql+psycopg://user:password@host/db or a SQLite file path "
                          f"({_CHECK})")


def _create(url: str, pool_size: int) -> Engine:
    return dialects.create_engine_for(url, pool_size=pool_size)


@contextmanager
def opening_errors(url: str) -> Iterator[None]:
    """Turn the errors of opening ``url`` into one ``StoreError`` line that says what to do."""
    try:
        yield
    except StoreError:
        raise
    except NoSuchModuleError as exc:
        raise _other_database(url.split(":", 1)[0]) from exc
    except (ArgumentError, ValueError) as exc:  # ValueError: e.g. a port that is not a number
        raise BadDatabaseUrl(f"{redacted(url)!r} is not a database URL; use "
                             "postgresql+psycopg://user:password@host/db or a SQLite file path "
                             f"({_CHECK})") from exc
    except ImportError as exc:
        raise StoreError(f"the database driver for {url.split(':', 1)[0]!r} is not installed "
                         f"({exc.name}); use postgresql+psycopg:// or sqlite:///") from exc
    except DBAPIError as exc:
        path = sqlite_path(url)
        if path is not None and not path.parent.is_dir():
            raise BadDatabaseUrl(f"cannot open the SQLite file {str(path)!r}: the directory "
                                 f"{str(path.parent)!r} does not exist; create it or "
                                 f"{_CHECK}") from exc
        raise StoreError(_unreachable(url, exc)) from exc


def _unreachable(url: str, exc: DBAPIError) -> str:
    reason = " ".join((str(exc.orig) or type(exc.orig).__name__).strip().splitlines()[0].split())
    path = sqlite_path(url)
    if path is not None:
        return f"cannot open the SQLite file {str(path)!r}: {reason}; {_CHECK}"
    if "does not exist" in reason:
        return (f"cannot open the database {redacted(url)}: {reason}; create it (createdb) "
                f"and run `dreads db upgrade`, or {_CHECK}")
    return (f"cannot open the database {redacted(url)}: {reason}; {_CHECK} and that the "
            "server is running")


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """The boundary owns the transaction: commit on success, roll back on error."""
    session = factory()
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
