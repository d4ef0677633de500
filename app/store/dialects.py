"""Where PostgreSQL and SQLite differ: the one place the store asks which database it has.

- the engine: SQLite's busy timeout, thread sharing and pragmas (WAL); PostgreSQL's pool; JSON
  columns read with orjson on both (``read_json``);
- clock: PostgreSQL's ``clock_timestamp()``; SQLite has none, this process's clock stands in;
- advisory locks (one sweeper at a time): PostgreSQL session locks; SQLite has one writer;
- holding a row for the transaction (``hold_row``): PostgreSQL ``FOR NO KEY UPDATE``; SQLite's
  write lock, taken at once;
- ``greatest``: PostgreSQL's ``GREATEST``, SQLite's two-argument ``max``;
- ``INSERT ... ON CONFLICT DO NOTHING``: each dialect's own insert construct;
- the bulk decision writer: ``COPY`` on PostgreSQL, an insert-ignoring on SQLite (chosen in
  ``store.runs`` by ``name``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, cast

import orjson
from sqlalchemy import ColumnElement, Table, create_engine, event, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session

__all__ = ["POSTGRESQL", "SQLITE", "advisory_lock", "clock_now", "create_engine_for", "greatest",
           "hold_row", "insert_ignoring", "is_postgresql", "name", "ping", "read_json",
           "upsert_adding"]

POSTGRESQL = "postgresql"
SQLITE = "sqlite"


def read_json(value: str | bytes) -> Any:
    """A JSON column's value: orjson (several times faster than ``json``: a report reads a
    million answers' probabilities); ``json`` for what orjson refuses (NaN written to SQLite
    before, integers beyond 64 bits)."""
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return json.loads(value)


def create_engine_for(url: str, *, pool_size: int) -> Engine:
    """A SQLAlchemy engine for ``url`` with its database's options."""
    if url.startswith(SQLITE):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False},
                               json_deserializer=read_json)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=pool_size,
                         json_deserializer=read_json)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def name(bind: Session | Engine | Connection) -> str:
    """The dialect's name (``postgresql`` or ``sqlite``) of a session, engine or connection."""
    if isinstance(bind, Session):
        return bind.get_bind().dialect.name
    return bind.dialect.name


def driver_connection(session: Session) -> Any:
    """The DB-API connection under ``session``'s (psycopg's for COPY), in its transaction."""
    raw = session.connection().connection.driver_connection
    assert raw is not None
    return raw


def is_postgresql(bind: Session | Engine | Connection) -> bool:
    return name(bind) == POSTGRESQL


def clock_now(session: Session) -> datetime:
    """The database's clock (PostgreSQL ``clock_timestamp()``; this process's clock on SQLite)."""
    if not is_postgresql(session):
        return datetime.now(UTC)
    return cast(datetime, session.execute(text("SELECT clock_timestamp()")).scalar_one())


def greatest(session: Session, *values: Any) -> ColumnElement[Any]:
    """SQL ``GREATEST(values...)`` (SQLite: the multi-argument ``max``)."""
    if name(session) == SQLITE:
        return func.max(*values)
    return func.greatest(*values)


def insert_ignoring(table: Table | type[Any], index_elements: Sequence[str],
                    returning: Any = None) -> dict[str, Any]:
    """``INSERT ... ON CONFLICT (index_elements) DO NOTHING [RETURNING returning]`` for each
    dialect, by its name (build once, pick per connection: ``stmts[dialects.name(conn)]``);
    ``returning`` is a column or a tuple of columns."""
    columns = returning if isinstance(returning, tuple) else (returning,)
    stmts: dict[str, Any] = {}
    for dialect_name, dialect in ((POSTGRESQL, postgresql), (SQLITE, sqlite)):
        stmt: Any = dialect.insert(table).on_conflict_do_nothing(
            index_elements=list(index_elements))
        stmts[dialect_name] = stmt.returning(*columns) if returning is not None else stmt
    return stmts


def upsert_adding(table: Table | type[Any], index_elements: Sequence[str],
                  added: Sequence[str]) -> dict[str, Any]:
    """``INSERT ... ON CONFLICT (index_elements) DO UPDATE SET c = c + excluded.c`` for each
    column of ``added`` (a NULL on either side keeps the other: ``COALESCE``), per dialect by
    its name, as ``insert_ignoring``: one statement adds to a counter row or creates it."""
    stmts: dict[str, Any] = {}
    for dialect_name, dialect in ((POSTGRESQL, postgresql), (SQLITE, sqlite)):
        stmt: Any = dialect.insert(table)
        target = stmt.table.c
        stmts[dialect_name] = stmt.on_conflict_do_update(
            index_elements=list(index_elements),
            set_={col: _add_nullable(target[col], stmt.excluded[col]) for col in added})
    return stmts


def _add_nullable(current: Any, delta: Any) -> Any:
    """``current + delta``, where a NULL on one side is the other side (NULL + NULL: NULL)."""
    return func.coalesce(current + delta, current, delta)


def ping(session: Session) -> None:
    """One ``SELECT 1``: raises the driver's error when the database does not answer."""
    session.execute(text("SELECT 1"))


def hold_row(session: Session, table: Table, row_id: int) -> None:
    """Hold row ``row_id`` of ``table`` (its ``id``) until the caller's transaction ends, so
    transactions that hold it take turns and each reads what those before it wrote.
    PostgreSQL: ``SELECT ... FOR NO KEY UPDATE`` (inserts that reference the row are not
    blocked). SQLite has one writer: a write to the row takes the database's write lock now
    (the driver begins its transaction only at the first write, and reads before it could see
    an older state)."""
    if is_postgresql(session):
        session.execute(select(table.c.id).where(table.c.id == row_id)
                        .with_for_update(key_share=True))
    else:
        session.execute(update(table).where(table.c.id == row_id).values(id=table.c.id))


def fence_row(session: Session, table: Table, row_id: int) -> None:
    """Hold row ``row_id`` of ``table`` against every transaction that references it until
    the caller's ends: PostgreSQL ``SELECT ... FOR UPDATE`` waits for those holding a share of
    it (an insert of a row with a foreign key to it) and makes new ones wait. SQLite: its
    write lock, taken now (as ``hold_row``)."""
    if is_postgresql(session):
        session.execute(select(table.c.id).where(table.c.id == row_id).with_for_update())
    else:
        session.execute(update(table).where(table.c.id == row_id).values(id=table.c.id))


@contextmanager
def advisory_lock(session: Session, lock_id: int, wait_s: float) -> Iterator[bool]:
    """Hold PostgreSQL session advisory lock ``lock_id`` on ``session``'s connection, waiting
    up to ``wait_s`` for it; yields whether it is held. ``session`` is the lock's alone: its
    connection is put in autocommit, so the lock is held across the caller's transactions on
    other sessions, and nothing else is written through it. Other databases (SQLite: a
    single writer) always yield True."""
    if not is_postgresql(session):
        yield True
        return
    conn = session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
    deadline = time.monotonic() + wait_s
    while not (got := bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"),
                                        {"k": lock_id}).scalar())):
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    try:
        yield got
    finally:
        if got:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": lock_id})
