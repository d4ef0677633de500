"""Database URLs as users give them: SQLAlchemy URLs or SQLite file paths (no SQLAlchemy import).

``--database-url`` (and ``DREADS_DATABASE_URL``) take a SQLAlchemy URL
(``postgresql+psycopg://user:pw@host/db``, ``sqlite:///eval.db``) or, for SQLite, just a file
path (``eval.db``): ``database_url`` turns either into a URL.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["DEFAULT_DATABASE_URL", "database_url", "normalize_url", "redacted", "sqlite_path"]

#: The store when neither ``--database-url`` nor ``DREADS_DATABASE_URL`` is given.
DEFAULT_DATABASE_URL = "sqlite:///./dreads.db"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def database_url(value: str | Path | None) -> str:
    """The SQLAlchemy URL of ``value``: a URL as is, a file path as a SQLite URL, nothing as
    the default (``./dreads.db``)."""
    if value is None or str(value) == "":
        return DEFAULT_DATABASE_URL
    text = str(value)
    if _SCHEME.match(text) or text.startswith("sqlite:"):
        return normalize_url(text)
    return f"sqlite:///{Path(text).expanduser()}"


def normalize_url(url: str) -> str:
    """Use psycopg 3 for plain ``postgresql://`` URLs."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (``sqlite:///x.db`` -> ``x.db``); None for another database or
    an in-memory one."""
    if not url.startswith("sqlite"):
        return None
    _, _, rest = url.partition(":///")
    path = rest.split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return Path(path)


def redacted(url: str) -> str:
    """``url`` with its password (in the user part or a ``?password=``) hidden, for messages
    (``app.engine.redact_url``)."""
    from app.engine import redact_url

    return redact_url(url)
