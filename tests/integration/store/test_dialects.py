"""Where PostgreSQL and SQLite differ, on both: the advisory lock one sweeper holds."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.store.db import session_scope
from app.store.dialects import advisory_lock, is_postgresql

Factory = sessionmaker[Session]
LOCK = 4242


def test_an_advisory_lock_is_held_by_one_session_at_a_time(factory: Factory) -> None:
    with session_scope(factory) as first, advisory_lock(first, LOCK, 0) as held:
        assert held
        with session_scope(factory) as second, advisory_lock(second, LOCK, 0.3) as also:
            # PostgreSQL: taken; SQLite has a single writer and takes no lock
            assert also is not is_postgresql(second)
    with session_scope(factory) as third, advisory_lock(third, LOCK, 0) as again:
        assert again, "released when its block ends"


def test_the_lock_is_held_across_the_holders_transactions(factory: Factory) -> None:
    """Other sessions commit while it is held; it stays held until its block ends."""
    with session_scope(factory) as holder, advisory_lock(holder, LOCK, 0) as held:
        assert held
        for _ in range(2):
            with session_scope(factory) as work:
                work.execute(text("SELECT 1"))
        with session_scope(factory) as other, advisory_lock(other, LOCK, 0) as taken:
            assert taken is not is_postgresql(other)
