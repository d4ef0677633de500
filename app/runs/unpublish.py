"""Decisions whose chunk message the broker did not take go back to ``pending``."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from app.errors import StoreError
from app.store.db import session_scope
from app.store.queue import mark_pending
from app.store.types import SessionFactory

__all__ = ["unpublish"]

log = logging.getLogger("dreads.store")


def unpublish(factory: SessionFactory, ids: Sequence[int]) -> None:
    """``mark_pending`` in a transaction of its own, after a publish that failed. A database
    that fails too leaves the rows queued: the sweeper re-publishes them once their queue is
    drained and the requeue window has passed."""
    try:
        with session_scope(factory, what="unpublish") as session:
            mark_pending(session, ids)
    except StoreError as exc:
        log.warning("could not put %d unpublished decision(s) back to pending: %s",
                    len(ids), exc.message)
