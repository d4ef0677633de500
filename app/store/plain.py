"""Read-only views over a bare DB-API connection (``sqlite3``, ``psycopg``), without
SQLAlchemy: what ``dreads status``, ``dreads runs`` and a ``resume`` with nothing to do read,
so that they answer in a fraction of the time the full store takes to load.

``open_plain(url)`` yields a ``Reader`` for ``app.store.status_sql``, or None when the store
cannot be read this way: not a SQLite file or a PostgreSQL URL, a file that is not there, a
schema at another revision than the code's, or any error of the driver. The caller then takes
the full path (``app.store.migrate.open_store``), which says exactly what is wrong.

    with open_plain(url) as reader:
        if reader is not None:
            run = status_sql.find_run(reader, "r1")
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from app.store.revisions import files_head
from app.store.urls import normalize_url, sqlite_path

__all__ = ["PlainReader", "open_plain"]

#: ``:name`` parameters (not ``::`` casts), as psycopg's ``%(name)s``.
_PARAM = re.compile(r"(?<![:\w]):(\w+)")
_PSYCOPG = "postgresql+psycopg://"


class PlainReader:
    """``status_sql.Reader`` over a DB-API connection."""

    def __init__(self, connection: Any, dialect: str) -> None:
        self.connection = connection
        self.dialect = dialect

    def rows(self, sql: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        if self.dialect == "postgresql":
            sql = _PARAM.sub(r"%(\1)s", sql)
        cursor = self.connection.cursor()
        try:
            cursor.execute(sql, dict(params))
            return list(cursor.fetchall())
        finally:
            cursor.close()


@contextlib.contextmanager
def open_plain(url: str) -> Iterator[PlainReader | None]:
    """A reader of the store at ``url`` (a SQLAlchemy URL), or None (see the module)."""
    try:
        connection, dialect = _connect(url)
    except Exception:  # the full path opens it again and says what is wrong
        connection = None
    if connection is None:
        yield None
        return
    try:
        reader = PlainReader(connection, dialect)
        yield reader if _at_head(reader) else None
    finally:
        with contextlib.suppress(Exception):
            connection.close()


def _connect(url: str) -> tuple[Any, str]:
    path = sqlite_path(url)
    if path is not None:
        if not Path(path).is_file():
            return None, "sqlite"
        return sqlite3.connect(path, timeout=30), "sqlite"
    url = normalize_url(url)  # postgresql:// and postgres:// are psycopg's
    if url.startswith(_PSYCOPG):
        import psycopg

        conninfo = "postgresql://" + url.removeprefix(_PSYCOPG)
        return psycopg.connect(conninfo, autocommit=True, connect_timeout=10), "postgresql"
    return None, ""


def _at_head(reader: PlainReader) -> bool:
    try:
        found = reader.rows("SELECT version_num FROM alembic_version", {})
    except Exception:
        return False
    head = files_head()
    return head is not None and [tuple(r) for r in found] == [(head,)]
