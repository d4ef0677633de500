"""The one place SQLAlchemy's and the drivers' errors become dreads' ``StoreError`` lines.

Two edges raise them, and each wraps its work in one context manager of this module:

- opening a database (``opening_errors``: ``make_engine``, the schema check, ``db upgrade``):
  a URL that does not parse, an unsupported scheme, a missing driver, a refused port, an
  unknown database, a SQLite file in a missing directory;
- a transaction (``database_errors``, inside ``session_scope``): a statement or a commit the
  database failed, a connection lost.

Each message is one line that says what to check. No caller outside the store catches a
SQLAlchemy or driver error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from app.errors import BadDatabaseUrl, StoreConflict, StoreError
from app.store.urls import redacted, sqlite_path

__all__ = ["database_errors", "opening_errors", "other_database"]

_CHECK = "check --database-url / DREADS_DATABASE_URL"
_SHAPES = "use postgresql+psycopg://user:password@host/db or a SQLite file path"
#: The longest reason from the database a message quotes.
_REASON_CHARS = 300


def other_database(scheme: str) -> BadDatabaseUrl:
    """The error for a database other than PostgreSQL and SQLite."""
    return BadDatabaseUrl(f"dreads stores runs in PostgreSQL or SQLite, not {scheme!r}; "
                          f"{_SHAPES} ({_CHECK})")


@contextmanager
def opening_errors(url: str) -> Iterator[None]:
    """Turn the errors of opening ``url`` into one ``StoreError`` line that says what to do."""
    try:
        yield
    except StoreError:
        raise
    except NoSuchModuleError as exc:
        raise other_database(url.split(":", 1)[0]) from exc
    except (ArgumentError, ValueError) as exc:  # ValueError: e.g. a port that is not a number
        raise BadDatabaseUrl(f"{redacted(url)!r} is not a database URL; {_SHAPES} "
                             f"({_CHECK})") from exc
    except ImportError as exc:
        raise StoreError(f"the database driver for {url.split(':', 1)[0]!r} is not installed "
                         f"({exc.name}); use postgresql+psycopg:// or sqlite:///") from exc
    except DBAPIError as exc:
        raise _unopened(url, exc) from exc


def _unopened(url: str, exc: DBAPIError) -> StoreError:
    reason = _reason(_said(exc))
    path = sqlite_path(url)
    if path is not None and not path.parent.is_dir():
        return BadDatabaseUrl(f"cannot open the SQLite file {str(path)!r}: the directory "
                              f"{str(path.parent)!r} does not exist; create it or {_CHECK}")
    if path is not None:
        return StoreError(f"cannot open the SQLite file {str(path)!r}: {reason}; {_CHECK}")
    if "does not exist" in reason:
        return StoreError(f"cannot open the database {redacted(url)}: {reason}; create it "
                          f"(createdb) and run `dreads db upgrade`, or {_CHECK}")
    return StoreError(f"cannot open the database {redacted(url)}: {reason}; {_CHECK} and that "
                      "the server is running")


@contextmanager
def database_errors(engine: Engine | None, what: str = "") -> Iterator[None]:
    """Turn a failure of the database behind ``engine`` (SQLAlchemy's wrapper, or its
    driver's own error where a driver connection is used directly, as COPY does) into one
    ``StoreError`` line; ``what`` (the work that failed) begins it when given."""
    try:
        yield
    except DBAPIError as exc:
        if _conflicting(_said(exc)):
            raise _conflict(what, _said(exc)) from exc
        raise _failed(what, _said(exc)) from exc
    except Exception as exc:
        if not isinstance(exc, _driver_errors(engine)):
            raise
        if _conflicting(exc):
            raise _conflict(what, exc) from exc
        raise _failed(what, exc) from exc


#: A write that met a concurrent one: a row it references deleted meanwhile, a unique key
#: taken, a serialization failure, a deadlock (PostgreSQL's SQLSTATEs; SQLite's error names).
#: Other integrity errors (NOT NULL, CHECK) are no race, and "try again" would not help.
_CONFLICT_STATES = frozenset({"23503", "23505", "40001", "40P01"})
_CONFLICT_SQLITE = frozenset({"SQLITE_CONSTRAINT_FOREIGNKEY", "SQLITE_CONSTRAINT_UNIQUE",
                              "SQLITE_CONSTRAINT_PRIMARYKEY"})


def _conflicting(orig: BaseException) -> bool:
    return (getattr(orig, "sqlstate", None) in _CONFLICT_STATES
            or getattr(orig, "sqlite_errorname", None) in _CONFLICT_SQLITE)


def _conflict(what: str, orig: BaseException) -> StoreConflict:
    head = f"{what}: " if what else ""
    return StoreConflict(f"{head}the database refused a write that met a concurrent one "
                         f"({type(orig).__name__}: {_reason(orig)}); the database works: "
                         "try again (a run deleted meanwhile is gone)")


def _driver_errors(engine: Engine | None) -> tuple[type[BaseException], ...]:
    """The driver's base error class (psycopg's, sqlite3's), when its module is loaded."""
    dbapi = getattr(engine.dialect, "loaded_dbapi", None) if engine is not None else None
    error = getattr(dbapi, "Error", None)
    return (error,) if isinstance(error, type) else ()


def _failed(what: str, orig: BaseException) -> StoreError:
    head = f"{what}: " if what else ""
    return StoreError(f"{head}the database failed ({type(orig).__name__}: {_reason(orig)}); "
                      f"{_CHECK} and that the server is running")


def _said(exc: DBAPIError) -> BaseException:
    """The driver's error under SQLAlchemy's wrapper (the wrapper where there is none)."""
    return exc.orig if exc.orig is not None else exc


def _reason(orig: BaseException) -> str:
    """The first line of what the database said, its spaces collapsed (one line, at most
    ``_REASON_CHARS``)."""
    lines = str(orig).strip().splitlines()
    first = " ".join(lines[0].split()) if lines else ""
    return (first or type(orig).__name__)[:_REASON_CHARS]
