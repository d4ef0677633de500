"""The breaker's SQL: a run's most recent attempts, and pausing or going on with a run.

    recent_outcomes   the outcome kinds of the run's last ``window`` counted attempts, newest
                      first (a range scan of ``ix_attempts_run_id``), with the newest detail
                      of each kind
    pause_run         ``runs.status`` active -> paused with its kind and reason: one UPDATE
                      guarded by the status, so of several workers tripping at once one wins;
                      the pause is kept in ``run_pauses`` (its history)
    run_status_of     the run's ``runs.status`` (read in the caller's transaction; locked
                      for the breaker's check)
    pause_reason      why the run is paused (None: it is not); pause_kind what paused it
    unpause_run       paused -> active, the reason cleared, the breaker's count started over
                      after the run's last attempt, and its queued decisions back to pending
                      (their messages were consumed while it was paused) for the next sweep;
                      its ``run_pauses`` row marked resumed (on the clock ``paused_at``
                      was stamped on: SQLite's CURRENT_TIMESTAMP has whole seconds only)
    probe_candidates  the runs paused by the breaker (not by a budget) whose probe is due
    take_probe        stamp ``runs.probed_at`` of a run whose probe is due: one guarded UPDATE,
                      so of N workers one probes per interval

The decision to trip is ``app.runs.breaker``'s.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, func, insert, or_, select, update

from app.store import dialects
from app.store.models import Attempt, Decision, DecisionStatus, Run, RunPause, RunStatus
from app.store.records import PauseKind, RunInfo
from app.store.runs import run_info
from app.store.types import Session

__all__ = ["RecentOutcomes", "pause_kind", "pause_reason", "pause_run", "probe_candidates",
           "recent_outcomes", "run_status_of", "take_probe", "unpause_run"]


@dataclass(frozen=True)
class RecentOutcomes:
    """The outcome kinds of a run's most recent counted attempts."""

    counted: int = 0  #: attempts looked at (at most the window)
    by_kind: dict[str, int] = field(default_factory=dict)
    latest_detail: dict[str, str] = field(default_factory=dict)  #: newest detail per kind


def recent_outcomes(session: Session, run_id: int, *, window: int,
                    not_counted: Collection[str]) -> RecentOutcomes:
    """The run's last ``window`` attempts whose outcome is not in ``not_counted`` and that
    came after its last resume from a pause (``runs.breaker_after``)."""
    after = session.scalar(select(Run.breaker_after).where(Run.id == run_id)) or 0
    stmt = (select(Attempt.outcome, Attempt.detail)
            .where(Attempt.run_id == run_id, Attempt.id > after,
                   Attempt.outcome.not_in(list(not_counted)))
            .order_by(Attempt.id.desc()).limit(window))
    by_kind: dict[str, int] = {}
    latest: dict[str, str] = {}
    rows = session.execute(stmt).all()
    for outcome, detail in rows:
        by_kind[outcome] = by_kind.get(outcome, 0) + 1
        latest.setdefault(outcome, detail or "")
    return RecentOutcomes(counted=len(rows), by_kind=by_kind, latest_detail=latest)


def run_status_of(session: Session, run_id: int, *, lock: bool = False) -> str | None:
    """The run's ``runs.status``; with ``lock``, the run's row is held first, until the
    caller's transaction ends (``dialects.hold_row``): the breaker's checks of one run take
    turns, so each sees the failures before it."""
    if lock:
        dialects.hold_row(session, cast(Table, Run.__table__), run_id)
    return session.scalar(select(Run.status).where(Run.id == run_id))


def pause_reason(session: Session, run_id: int) -> str | None:
    """Why the run is paused, or None when it is not paused."""
    row = session.execute(select(Run.status, Run.pause_reason).where(Run.id == run_id)).first()
    if row is None or row[0] != RunStatus.PAUSED:
        return None
    return row[1] or "paused"


def pause_kind(session: Session, run_id: int) -> str | None:
    """What paused the run (``PauseKind``), or None."""
    return session.scalar(select(Run.pause_kind).where(Run.id == run_id))


def pause_run(session: Session, run_id: int, *, kind: str, reason: str, now: datetime) -> bool:
    """Pause an active run; False when it is not active (paused by another worker already,
    or cancelled)."""
    stmt = (update(Run).where(Run.id == run_id, Run.status == RunStatus.ACTIVE)
            .values(status=RunStatus.PAUSED, pause_kind=kind, pause_reason=reason[:2000],
                    paused_at=now)
            .returning(Run.id).execution_options(synchronize_session=False))
    if session.execute(stmt).first() is None:
        return False
    session.execute(insert(RunPause).values(run_id=run_id, kind=kind, reason=reason[:2000],
                                            paused_at=now))
    return True


def unpause_run(session: Session, run_id: int) -> bool:
    """Go on with a paused run (see the module's docstring); False when it was not paused."""
    last = session.scalar(select(func.max(Attempt.id)).where(Attempt.run_id == run_id))
    stmt = (update(Run).where(Run.id == run_id, Run.status == RunStatus.PAUSED)
            .values(status=RunStatus.ACTIVE, pause_kind=None, pause_reason=None,
                    paused_at=None, probed_at=None, breaker_after=last)
            .returning(Run.id).execution_options(synchronize_session=False))
    if session.execute(stmt).first() is None:
        return False
    session.execute(update(RunPause)
                    .where(RunPause.run_id == run_id, RunPause.resumed_at.is_(None))
                    .values(resumed_at=dialects.clock_now(session))
                    .execution_options(synchronize_session=False))
    session.execute(update(Decision)
                    .where(Decision.run_id == run_id, Decision.status == DecisionStatus.QUEUED)
                    .values(status=DecisionStatus.PENDING, enqueued_at=None)
                    .execution_options(synchronize_session=False))
    return True


def _probe_due(*, now: datetime, interval_s: float, give_up_s: float | None) -> list[Any]:
    """The conditions of a run whose breaker probe is due at ``now``."""
    due = [Run.status == RunStatus.PAUSED, Run.pause_kind == PauseKind.BREAKER,
           or_(Run.probed_at.is_(None), Run.probed_at <= now - timedelta(seconds=interval_s))]
    if give_up_s is not None:
        due.append(Run.paused_at > now - timedelta(seconds=give_up_s))
    return due


def probe_candidates(session: Session, *, now: datetime, interval_s: float,
                     give_up_s: float | None) -> list[tuple[RunInfo, datetime | None]]:
    """Runs paused by the breaker whose probe is due: never probed since they paused, or
    last probed ``interval_s`` ago, and (``give_up_s``) paused less than that long ago; each
    with when it was last probed (None: never since it paused)."""
    rows = session.scalars(select(Run).where(
        *_probe_due(now=now, interval_s=interval_s, give_up_s=give_up_s)).order_by(Run.id))
    return [(run_info(run), run.probed_at) for run in rows]


def take_probe(session: Session, run_id: int, *, now: datetime, interval_s: float,
               give_up_s: float | None) -> bool:
    """Stamp the run's ``probed_at`` when its probe is due (see ``probe_candidates``): True
    for the one caller that gets to probe it now."""
    stmt = (update(Run).where(Run.id == run_id,
                              *_probe_due(now=now, interval_s=interval_s, give_up_s=give_up_s))
            .values(probed_at=now).returning(Run.id)
            .execution_options(synchronize_session=False))
    return session.execute(stmt).first() is not None
