"""Run and check Alembic migrations from code (``dreads db upgrade``).

Checking the schema is on every command's path (``open_store``), so it does not load Alembic:
the head revision is read from the migration files' ``revision`` / ``down_revision`` lines and
the current one from ``alembic_version``, once the table is known to be there. Alembic itself
is imported only to upgrade, or when the files do not show a single head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.errors import SchemaNotReady, StoreError
from app.store.db import check_supported, make_engine, make_sessionmaker
from app.store.errors import opening_errors
from app.store.revisions import MIGRATIONS as _MIGRATIONS
from app.store.revisions import files_head
from app.store.urls import database_url, redacted, sqlite_path

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["alembic_config", "check_schema", "current_revision", "head_revision", "open_store",
           "require_sqlite_file", "upgrade"]



def alembic_config(url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision(url: str | None = None) -> str | None:
    """The revision the code needs (``url`` is not used: the migrations are the code's)."""
    return files_head() or _alembic_head()


def _alembic_head() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The schema revision recorded in the database (None: no dreads schema).

    The table is looked for before it is read: on PostgreSQL a failed SELECT would abort the
    transaction, and every statement after it on that connection would fail for that reason
    instead of its own.
    """
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(url: str, revision: str = "head") -> None:
    """Create the schema or bring it to ``revision``.

    Raises:
        StoreError: the database cannot be opened (one line saying what to check).
    """
    from alembic import command

    url = database_url(url)
    check_supported(url)
    with opening_errors(url):
        command.upgrade(alembic_config(url), revision)


def check_schema(engine: Engine) -> None:
    """Raise SchemaNotReady with the command to run when the schema is missing or behind."""
    url = engine.url.render_as_string(hide_password=True)
    head = head_revision()
    current = current_revision(engine)
    if current is None:
        raise SchemaNotReady(
            f"the database at {url} has no dreads schema; "
            "run `dreads db upgrade` (same DREADS_DATABASE_URL) first"
        )
    if current != head:
        raise SchemaNotReady(
            f"the database schema is at revision {current}, the code needs {head}; "
            "run `dreads db upgrade`"
        )


def open_store(url: str) -> sessionmaker[Session]:
    """A session factory on ``url`` once its schema is at head. A SQLite file that does not
    exist is not created (a typo in a path must not leave an empty database behind).

    Raises:
        SchemaNotReady: the schema is missing or behind (its engine is disposed).
        StoreError: the database cannot be opened; the message says what to check.
    """
    url = database_url(url)
    require_sqlite_file(url)
    engine = make_engine(url)
    try:
        with opening_errors(url):
            check_schema(engine)
    except StoreError:
        engine.dispose()
        raise
    return make_sessionmaker(engine)


def require_sqlite_file(url: str) -> None:
    """Refuse a SQLite URL whose file does not exist (rather than create an empty one).

    Raises:
        SchemaNotReady: the file, or its directory, does not exist.
    """
    path = sqlite_path(url)
    if path is None or path.exists():
        return
    if path.parent.is_dir():
        raise SchemaNotReady(
            f"no dreads database at {str(path)!r} (the file does not exist): `dreads db "
            "upgrade` creates one (`dreads run FILE` does it for you), or point --database-url "
            "/ DREADS_DATABASE_URL at yours")
    raise SchemaNotReady(f"no dreads database at {str(path)!r}: the directory "
                         f"{str(path.parent)!r} does not exist; check --database-url / "
                         f"DREADS_DATABASE_URL ({redacted(url)})")
