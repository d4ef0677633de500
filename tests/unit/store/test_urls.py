"""Database URLs as users write them, and the schema head read without Alembic."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.store.migrate import _alembic_head, head_revision
from app.store.revisions import files_head as _files_head
from app.store.urls import DEFAULT_DATABASE_URL, database_url, redacted, sqlite_path


@pytest.mark.parametrize(("given", "url"), [
    (None, DEFAULT_DATABASE_URL), ("", DEFAULT_DATABASE_URL),
    ("eval.db", "sqlite:///eval.db"), ("/data/x.db", "sqlite:////data/x.db"),
    ("sqlite:///x.db", "sqlite:///x.db"),
    ("postgresql://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
    ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
    ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
])
def test_database_url_takes_urls_and_sqlite_paths(given: str | None, url: str) -> None:
    assert database_url(given) == url


@pytest.mark.parametrize(("url", "path"), [
    ("sqlite:///./dreads.db", Path("dreads.db")), ("sqlite:////abs/x.db", Path("/abs/x.db")),
    ("sqlite:///x.db?mode=ro", Path("x.db")), ("sqlite://", None), ("sqlite:///:memory:", None),
    ("postgresql+psycopg://u@h/db", None)])
def test_sqlite_path(url: str, path: Path | None) -> None:
    assert sqlite_path(url) == path


def test_passwords_are_hidden_in_messages() -> None:
    assert redacted("postgresql+psycopg://ops:s3cret@db:5432/x") == \
        "postgresql+psycopg://ops:***@db:5432/x"
    assert redacted("postgresql+psycopg://ops@db/x") == "postgresql+psycopg://ops@db/x"


def test_the_schema_head_from_the_files_is_alembics() -> None:
    assert _files_head() is not None
    assert _files_head() == _alembic_head() == head_revision()
