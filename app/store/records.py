"""What the store's rows mean, without SQLAlchemy: statuses, how a user sees them, a run.

``app.store.models`` (the tables) and every query module use these; so do the plain
read-only views (``app.store.plain``), which start without loading SQLAlchemy at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

__all__ = ["ACTIVE", "NOT_STARTED", "DecisionStatus", "RunInfo", "RunStatus", "shown_status"]


class RunStatus(StrEnum):
    ACTIVE = "active"  #: accepting and processing work
    CANCELLED = "cancelled"  #: workers skip its decisions


class DecisionStatus(StrEnum):
    PENDING = "pending"  #: in SQL, no message published yet (or to be re-published)
    QUEUED = "queued"  #: a chunk message carrying it was published
    LEASED = "leased"  #: a worker holds it until lease_expires_at
    DONE = "done"  #: answers written
    FAILED = "failed"  #: attempts exhausted on transient errors (resume --retry-failed)
    REJECTED = "rejected"  #: permanent input problem; never retried
    CANCELLED = "cancelled"  #: the run was cancelled before it ran


#: What no worker has started: cancelling a run cancels these.
NOT_STARTED = (DecisionStatus.PENDING, DecisionStatus.QUEUED)
#: What is still to run or running.
ACTIVE = (DecisionStatus.PENDING, DecisionStatus.QUEUED, DecisionStatus.LEASED)


def shown_status(status: str, run_status: str) -> str:
    """A decision's status as a user sees it. ``cancel`` marks the run at once (no worker
    takes its decisions from then on) and leaves the rows no worker started to the sweeper,
    which settles them a page at a time: they are cancelled already, whatever the row says."""
    if run_status == RunStatus.CANCELLED and status in NOT_STARTED:
        return DecisionStatus.CANCELLED.value  # plain text, as read from SQL
    return status


@dataclass(frozen=True)
class RunInfo:
    """A run as the commands see it."""

    id: int
    name: str
    status: str
    settings: Mapping[str, Any]
    settings_hash: str
    fingerprint: Mapping[str, Any] | None
    upstream: str
    engine: str
    source: str | None
    replicates: int
    created_at: datetime | None
