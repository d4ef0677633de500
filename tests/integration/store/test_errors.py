"""``session_scope`` owns the transaction and its errors (``app.store.errors``): a failure of
the database is one ``StoreError`` line, whatever raised it, and nothing of the failed
transaction is kept. On real PostgreSQL and SQLite."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from app.errors import EXIT_FAILURE, EXIT_USAGE, InputError, StoreConflict, StoreError
from app.store import dialects
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.migrate import open_store, upgrade
from app.store.models import Run
from tests.fixtures.services import SHARED_PG, free_port

Factory = sessionmaker[Session]


def _add_run(session: Session, name: str = "r") -> None:
    session.add(Run(name=name, status="active", settings={}, settings_hash="h", upstream="sim"))
    session.flush()


def _runs(factory: Factory) -> int:
    with session_scope(factory) as session:
        return int(session.scalar(select(func.count()).select_from(Run)) or 0)


def test_a_failed_statement_is_one_store_error_line_and_the_transaction_is_rolled_back(
        factory: Factory) -> None:
    with pytest.raises(StoreError) as caught, session_scope(factory, what="submit") as session:
        _add_run(session)
        session.execute(text("SELECT * FROM no_such_table"))
    message = caught.value.message
    assert message.startswith("submit: the database failed (")
    assert "no_such_table" in message and "\n" not in message
    assert "DREADS_DATABASE_URL" in message
    assert _runs(factory) == 0


def test_a_commit_that_meets_a_concurrent_write_is_a_conflict_to_retry(
        factory: Factory) -> None:
    """A unique key taken (or a row deleted) meanwhile: the database works, try again; never
    "check --database-url"."""
    with session_scope(factory) as session:
        _add_run(session, "taken")
    with pytest.raises(StoreConflict, match=r"met a concurrent one.*try again"), \
            session_scope(factory) as session:
        session.add(Run(name="taken", status="active", settings={}, settings_hash="h",
                        upstream="sim"))  # written only at the commit's flush
    assert _runs(factory) == 1


def test_a_write_no_retry_can_mend_is_a_failure_not_a_conflict(factory: Factory) -> None:
    """A NOT NULL column left empty is no race: "try again" would not help."""
    with pytest.raises(StoreError) as caught, session_scope(factory) as session:
        session.add(Run(name="r", status="active", settings={}, settings_hash=None,
                        upstream="sim"))
    assert not isinstance(caught.value, StoreConflict)
    assert "try again" not in caught.value.message
    assert _runs(factory) == 0


def test_dreads_own_errors_pass_through_untouched_and_roll_back(factory: Factory) -> None:
    refused = InputError("no such run")
    with pytest.raises(InputError) as caught, session_scope(factory) as session:
        _add_run(session)
        raise refused
    assert caught.value is refused
    assert _runs(factory) == 0


def test_a_driver_error_under_sqlalchemy_is_a_store_error_too(factory: Factory) -> None:
    """COPY talks to the driver's connection directly: its errors are translated as well."""
    with pytest.raises(StoreError, match="the database failed") as caught, \
            session_scope(factory, what="copy") as session:
        raw = dialects.driver_connection(session)
        cursor = raw.cursor()
        try:
            cursor.execute("SELECT * FROM no_such_table")
        finally:
            cursor.close()
    assert caught.value.message.startswith("copy: ")


def test_a_server_that_does_not_answer_is_one_line_that_says_what_to_check() -> None:
    engine = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/dreads")
    try:
        with pytest.raises(StoreError) as caught, \
                session_scope(make_sessionmaker(engine), what="status") as session:
            session.execute(text("SELECT 1"))
    finally:
        engine.dispose()
    message = caught.value.message
    assert message.startswith("status: the database failed (")
    assert "refused" in message.lower() and "\n" not in message
    assert "check --database-url / DREADS_DATABASE_URL and that the server is running" in message


#: Each kind of database that cannot be opened: (URL, what the line says, whether the URL is
#: the user's to fix: exit status 2, else 1)
UNOPENABLE = {
    "refused port": (f"postgresql://postgres@127.0.0.1:{free_port()}/test",
                     "Connection refused", False),
    "unknown database": (SHARED_PG.rsplit("/", 1)[0] + "/no_such_db_xyz",
                         "create it (createdb) and run `dreads db upgrade`", False),
    "sqlite in a missing directory": ("sqlite:///missing/dir/x.db",
                                      "the directory 'missing/dir' does not exist", True),
    "unsupported scheme": ("mysql://user@host/db", "PostgreSQL or SQLite, not 'mysql'", True),
    "not a URL": ("postgresql://user@host:notaport/db", "is not a database URL", True),
}


@pytest.mark.parametrize("case", sorted(UNOPENABLE))
def test_a_database_that_cannot_be_opened_is_one_line_that_says_what_to_do(case: str) -> None:
    url, says, users_to_fix = UNOPENABLE[case]
    for opening in (upgrade, open_store):
        with pytest.raises(StoreError) as caught:
            opening(url)
        message = caught.value.message
        assert says in message and "\n" not in message, message
        assert "DREADS_DATABASE_URL" in message or "dreads db upgrade" in message
        assert caught.value.exit_code == (EXIT_USAGE if users_to_fix else EXIT_FAILURE)
