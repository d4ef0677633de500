"""Run and check Alembic migrations from code (``dreads db upgrade``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.errors import SchemaNotReady
from app.store.db import make_engine, make_sessionmaker

__all__ = ["alembic_config", "check_schema", "current_revision", "head_revision", "open_store",
           "upgrade"]

_MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision(url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(url)).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def check_schema(engine: Engine) -> None:
    """Raise SchemaNotReady with the command to run when the schema is missing or behind."""
    url = engine.url.render_as_string(hide_password=False)
    head = head_revision(url)
    current = current_revision(engine)
    if current is None:
        raise SchemaNotReady(
            f"the database at {engine.url!r} has no dreads schema; "
            "run `dreads db upgrade` (same DREADS_DATABASE_URL) first"
        )
    if current != head:
        raise SchemaNotReady(
            f"the database schema is at revision {current}, the code needs {head}; "
            "run `dreads db upgrade`"
        )


def open_store(url: str) -> sessionmaker[Session]:
    """A session factory on ``url`` once its schema is at head.

    Raises:
        SchemaNotReady: the schema is missing or behind (its engine is disposed).
    """
    engine = make_engine(url)
    try:
        check_schema(engine)
    except SchemaNotReady:
        engine.dispose()
        raise
    return make_sessionmaker(engine)
