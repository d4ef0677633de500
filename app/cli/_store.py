"""The store as the inspecting commands open it: one session, or the plain driver path."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from app.cli.options import database_url, opened_store

if TYPE_CHECKING:
    from app.store.status_sql import Reader
    from app.store.types import Session

__all__ = ["plain_read", "store_session"]

log = logging.getLogger("dreads.cli")

T = TypeVar("T")


@contextmanager
def store_session(database: str | None) -> Iterator[Session]:
    """One transaction on the store ``database`` names (or ``DREADS_DATABASE_URL``)."""
    from app.store.db import session_scope

    with opened_store(database_url(database)) as factory, session_scope(factory) as session:
        yield session


def plain_read(database: str | None, read: Callable[[Reader], T | None]) -> T | None:
    """``read`` over the store through a bare driver connection, without loading SQLAlchemy
    (``app.store.plain``): a third of the start-up of the full store. None when that cannot
    answer (a store of another revision, a run not there, any error): the caller then takes
    the full path, which says what is wrong."""
    from app.store.plain import open_plain

    try:
        with open_plain(database_url(database)) as reader:
            return None if reader is None else read(reader)
    except Exception:
        log.debug("the plain read path could not answer", exc_info=True)
        return None
