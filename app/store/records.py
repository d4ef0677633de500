"""What the store's rows hold, without SQLAlchemy: the status columns' values, a run.

``app.store.models`` (the tables), ``app.store.states`` (what they mean to a user) and every
query module use these; so do the plain read-only views (``app.store.plain``), which start
without loading SQLAlchemy at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from app.engine.types import is_simulator

__all__ = ["DecisionStatus", "PauseKind", "RunInfo", "RunStatus"]


class RunStatus(StrEnum):
    """``runs.status``: whether the run was cancelled or paused. What a user sees is the
    run's state, derived from this and its decisions (``app.store.states.run_state``)."""

    ACTIVE = "active"  #: neither cancelled nor paused
    CANCELLED = "cancelled"  #: workers skip its decisions
    #: workers skip its decisions until ``resume`` (``runs.pause_kind`` and ``pause_reason``
    #: say why)
    PAUSED = "paused"


class PauseKind(StrEnum):
    """``runs.pause_kind``: what paused a run."""

    #: most recent attempts failed with the same upstream kind (``app.runs.breaker``)
    BREAKER = "breaker"
    #: its recorded cost reached its budget (``runs.max_cost``; ``app.runs.budget``)
    BUDGET = "budget"


class DecisionStatus(StrEnum):
    PENDING = "pending"  #: in SQL, no message published yet (or to be re-published)
    QUEUED = "queued"  #: a chunk message carrying it was published
    LEASED = "leased"  #: a worker holds it until lease_expires_at
    DONE = "done"  #: answers written
    FAILED = "failed"  #: attempts exhausted on transient errors (resume --retry-failed)
    REJECTED = "rejected"  #: permanent input problem; never retried
    CANCELLED = "cancelled"  #: the run was cancelled before it ran


@dataclass(frozen=True)
class RunInfo:
    """A run as the commands see it."""

    id: int
    name: str
    status: str  #: ``runs.status`` (``RunStatus``); a user sees ``states.run_state``
    settings: Mapping[str, Any]
    settings_hash: str
    fingerprint: Mapping[str, Any] | None
    upstream: str
    engine: str
    source: str | None
    replicates: int
    created_at: datetime | None
    pause_kind: str | None = None  #: ``PauseKind`` while the run is paused
    pause_reason: str | None = None  #: why it paused and what to check, for a user
    paused_at: datetime | None = None

    @property
    def simulator(self) -> bool:
        """Its answers come from the simulator, not from a model (``is_simulator``: its
        upstream, the fingerprint its server gave, or its decision endpoint)."""
        return is_simulator(self.upstream, self.fingerprint, settings=self.settings)
