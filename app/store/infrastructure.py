"""What the infrastructure did to a run: attempts it ended (a worker lost, an interruption, a
pause, an outage, a model not served), the decisions they touched and whether those recovered,
and every pause of the run. The one computation ``dreads status``, ``dreads report``, the run
page and ``/metrics`` show; never per cell, since it says nothing about a cell's reads
(``app.errors.INFRASTRUCTURE_KINDS``).

    events = infrastructure_events(reader, run_id)
    events.lines()  # ["128 attempts lost with their worker (...): 128 decisions, all recovered",
                    #  ..., "1 pause by the breaker (...), resumed"]
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.errors import INFRASTRUCTURE_KINDS, OutcomeKind
from app.store.records import DecisionStatus, PauseKind, RunStatus
from app.store.states import OPEN, quoted

if TYPE_CHECKING:
    from app.store.status_sql import Reader

__all__ = ["INFRA_ATTEMPTS", "InfrastructureEvents", "InfrastructureKind", "PauseEvent",
           "infrastructure_events"]


#: Per infrastructure kind: attempts, decisions they touched, of those done, still open, and
#: ended unanswered for that very kind.
INFRA_ATTEMPTS = f"""
SELECT a.outcome, count(*), count(DISTINCT a.decision_id),
       count(DISTINCT CASE WHEN d.status = '{DecisionStatus.DONE}' THEN a.decision_id END),
       count(DISTINCT CASE WHEN d.status IN ({quoted(OPEN)}) THEN a.decision_id END),
       count(DISTINCT CASE WHEN d.status = '{DecisionStatus.FAILED}'
                            AND d.last_error_kind = a.outcome THEN a.decision_id END)
FROM attempts AS a JOIN decisions AS d ON d.id = a.decision_id
WHERE a.run_id = :run AND a.outcome IN ({quoted(INFRASTRUCTURE_KINDS)})
GROUP BY a.outcome"""
#: Every pause of the run, and the run's status (a pause never resumed ended with the run
#: cancelled unless the run is paused still).
PAUSES = """
SELECT p.kind, p.reason, p.paused_at, p.resumed_at, r.status
FROM run_pauses AS p JOIN runs AS r ON r.id = p.run_id
WHERE p.run_id = :run ORDER BY p.id"""

#: What an attempt of each kind was ended by, in words.
_WORDS: dict[str, str] = {
    OutcomeKind.WORKER_LOST: "lost with their worker (killed, or its lease expired)",
    OutcomeKind.CANCELLED: "interrupted (Ctrl-C, a worker's shutdown, or the run cancelled)",
    OutcomeKind.PAUSED: "ended by a pause of the run (not charged)",
    OutcomeKind.UPSTREAM_UNREACHABLE: "failed: the model server was unreachable",
    OutcomeKind.TIMEOUT: "failed: the model server did not answer in time",
    OutcomeKind.SERVER_ERROR: "failed: the model server answered 5xx",
    OutcomeKind.THROTTLED: "failed: the endpoint kept rate limiting",
    OutcomeKind.DB_ERROR: "failed: the database failed",
    OutcomeKind.NOT_SERVED: "refused: a worker's server does not serve the run's model",
    OutcomeKind.UNAUTHORIZED: "refused: a worker's API key was not accepted",
    OutcomeKind.IMAGE_UNREACHABLE: "failed: an image's host did not answer",
    OutcomeKind.PUBLISH_ERROR: "failed: the broker did not take a message",
    OutcomeKind.ERROR: "failed: a configuration error",
}
_PAUSED_BY: dict[str, str] = {PauseKind.BREAKER: "the breaker", PauseKind.BUDGET: "the budget"}


@dataclass(frozen=True)
class InfrastructureKind:
    """Attempts the infrastructure ended one way, and what became of their decisions."""

    kind: str
    attempts: int
    decisions: int  #: decisions those attempts were at
    recovered: int  #: of those, answered since
    open: int  #: still to run (or running)
    unanswered: int  #: ended failed for this very kind (retries spent)

    def line(self) -> str:
        what = _WORDS.get(self.kind, f"ended with {self.kind}")
        return f"{_counted(self.attempts, 'attempt')} {what}: {self.fate()}"

    def fate(self) -> str:
        if self.recovered == self.decisions:
            return f"{_counted(self.decisions, 'decision')}, all recovered"
        parts = [f"{self.recovered} recovered"]
        if self.open:
            parts.append(f"{self.open} still to run")
        if self.unanswered:
            parts.append(f"{self.unanswered} ended unanswered")
        other = self.decisions - self.recovered - self.open - self.unanswered
        if other:
            parts.append(f"{other} ended for another reason")
        return f"{_counted(self.decisions, 'decision')}: " + ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "attempts": self.attempts, "decisions": self.decisions,
                "recovered": self.recovered, "open": self.open, "unanswered": self.unanswered}


@dataclass(frozen=True)
class PauseEvent:
    """One pause of the run (``run_pauses``)."""

    kind: str  #: PauseKind
    reason: str | None
    paused_at: datetime | None
    resumed_at: datetime | None  #: None: still paused, or ``cancelled``
    cancelled: bool = False  #: the run was cancelled while paused (it never resumed)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason,
                "paused_at": _iso(self.paused_at), "resumed_at": _iso(self.resumed_at),
                "cancelled": self.cancelled}


@dataclass(frozen=True)
class InfrastructureEvents:
    """Everything the infrastructure did to one run (``infrastructure_events``)."""

    kinds: tuple[InfrastructureKind, ...] = ()
    pauses: tuple[PauseEvent, ...] = ()

    @property
    def attempts(self) -> int:
        """Attempts the infrastructure ended."""
        return sum(k.attempts for k in self.kinds)

    @property
    def unanswered(self) -> int:
        """Decisions left unanswered by the infrastructure (its retries spent)."""
        return sum(k.unanswered for k in self.kinds)

    def by_kind(self) -> dict[str, int]:
        return {k.kind: k.attempts for k in self.kinds}

    def lines(self) -> list[str]:
        """One line per kind of event, in words: what happened and whether it recovered."""
        return [k.line() for k in self.kinds] + self._pause_lines()

    def _pause_lines(self) -> list[str]:
        out = []
        for kind in sorted({p.kind for p in self.pauses}):
            pauses = [p for p in self.pauses if p.kind == kind]
            resumed = sum(p.resumed_at is not None for p in pauses)
            cancelled = sum(p.cancelled for p in pauses)
            paused = len(pauses) - resumed - cancelled
            fate = ("resumed" if resumed == len(pauses) else ", ".join(
                part for n, part in ((resumed, f"{resumed} resumed"),
                                     (cancelled, "the run cancelled while paused"),
                                     (paused, "still paused")) if n))
            reason = _short(pauses[-1].reason)
            out.append(f"{_counted(len(pauses), 'pause')} by {_PAUSED_BY.get(kind, kind)}"
                       + (f" ({reason})" if reason else "") + f", {fate}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "unanswered": self.unanswered,
                "kinds": [k.as_dict() for k in self.kinds],
                "pauses": [p.as_dict() for p in self.pauses], "lines": self.lines()}


def infrastructure_events(reader: Reader, run_id: int) -> InfrastructureEvents:
    """What the infrastructure did to run ``run_id``, from SQL (any ``Reader``)."""
    params = {"run": run_id}
    kinds = sorted((InfrastructureKind(str(kind), *(int(v or 0) for v in rest))
                    for kind, *rest in reader.rows(INFRA_ATTEMPTS, params)),
                   key=lambda k: (-k.attempts, k.kind))
    pauses = tuple(PauseEvent(str(kind), reason, _time(at), _time(back),
                              cancelled=back is None and status == RunStatus.CANCELLED)
                   for kind, reason, at, back, status in reader.rows(PAUSES, params))
    return InfrastructureEvents(kinds=tuple(kinds), pauses=pauses)


def _counted(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _short(reason: str | None, limit: int = 120) -> str:
    """What a pause's reason says happened, without the detail and what to do (those are for a
    live pause: ``dreads status`` shows them whole): "45 of the last 50 attempts failed with
    server_error"."""
    if not reason:
        return ""
    first = reason.split(": ")[0].split(" (")[0].strip()
    return first if len(first) <= limit else first[:limit - 1] + "…"


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
