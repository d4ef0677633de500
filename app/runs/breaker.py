"""The breaker: a run whose recent attempts keep failing the same way pauses.

A model server that answers every read with a 5xx, an upstream that cannot be reached, reads
that time out, an endpoint that throttles past its ``retry-after``: each decision would walk
through its attempts until it is ``failed``, a whole run of them. Instead, on each failed
attempt of such a kind (``TRIPPING``), in the transaction that records it, the run's last
``window`` counted attempts are read (``app.store.breaker.recent_outcomes``); when at least
``threshold`` of the window failed with one tripping kind, the run pauses: ``runs.status``
paused with the kind and a reason that says what to check (one guarded UPDATE: of the workers
that trip at once, one pauses it). From then on no claim takes its decisions, and an attempt
that was in flight and fails is put back to pending uncharged (a ``paused`` attempt row).
``resume`` closes the breaker and goes on; the breaker then counts only later attempts.

What is not counted: the attempt rows that are not one claim's end (``refused`` questions,
``not_served``/``unauthorized`` claims, ``cancelled`` and ``paused`` ones). A rejected or
poison decision is counted but never trips: one bad decision cannot pause a run.
"""

from __future__ import annotations

import logging
import math
import shlex
from dataclasses import dataclass
from datetime import datetime

from app.errors import OutcomeKind
from app.store.breaker import pause_run, recent_outcomes, run_status_of
from app.store.queue import AttemptInfo, Claimed, fail_decision, release_unserved
from app.store.records import PauseKind, RunStatus
from app.store.types import Session

__all__ = ["DEFAULT_PROBE_S", "DEFAULT_THRESHOLD", "DEFAULT_WINDOW", "NOT_COUNTED", "TRIPPING",
           "BreakerPolicy", "Failure", "Recorded", "breaker_reason", "record_failure"]

log = logging.getLogger("dreads.breaker")

#: The attempts looked at, and the share of them failing with one tripping kind that pauses
#: the run (docs/operations.md#the-breaker says how they were chosen).
DEFAULT_WINDOW = 50
DEFAULT_THRESHOLD = 0.9
#: Seconds between two probe reads of a run paused by the breaker.
DEFAULT_PROBE_S = 10.0
#: Failures of the upstream rather than of a decision.
TRIPPING = frozenset({OutcomeKind.UPSTREAM_UNREACHABLE, OutcomeKind.SERVER_ERROR,
                      OutcomeKind.TIMEOUT, OutcomeKind.THROTTLED})
NOT_COUNTED = frozenset({OutcomeKind.REFUSED, OutcomeKind.NOT_SERVED, OutcomeKind.UNAUTHORIZED,
                         OutcomeKind.CANCELLED, OutcomeKind.PAUSED})
_CHECK = {
    OutcomeKind.SERVER_ERROR: "check the model server and its logs",
    OutcomeKind.UPSTREAM_UNREACHABLE: "check that the model server is up and reachable",
    OutcomeKind.TIMEOUT: "check the model server's load, or raise DREADS_READ_TIMEOUT_S",
    OutcomeKind.THROTTLED: "check the endpoint's rate limits, or lower the run's budget",
}


@dataclass(frozen=True)
class BreakerPolicy:
    """When a run pauses: ``threshold`` of its last ``window`` attempts failed with one
    tripping kind (``DREADS_BREAKER_WINDOW``, ``DREADS_BREAKER_THRESHOLD``; either 0: off);
    and when it closes by itself: a probe read every ``probe_s`` (``DREADS_BREAKER_PROBE_S``;
    0: never, the run waits for ``resume``) until it succeeds, or until the run has been
    paused ``give_up_s`` (``DREADS_BREAKER_GIVE_UP_S``; None: never give up)."""

    window: int = DEFAULT_WINDOW
    threshold: float = DEFAULT_THRESHOLD
    probe_s: float = DEFAULT_PROBE_S
    give_up_s: float | None = None

    @property
    def probes(self) -> bool:
        """Whether a run paused by the breaker is probed (and resumed by itself)."""
        return self.probe_s > 0

    @property
    def enabled(self) -> bool:
        return self.window > 0 and self.threshold > 0

    @property
    def trip_count(self) -> int:
        """Failures of one kind in a full window that pause the run."""
        return max(1, math.ceil(self.threshold * self.window - 1e-9))


@dataclass(frozen=True)
class Failure:
    """A failed attempt to record."""

    claim: Claimed
    kind: str
    detail: str
    permanent: bool
    attempt: AttemptInfo
    max_attempts: int


@dataclass(frozen=True)
class Recorded:
    """What recording a failure did."""

    status: str | None  #: the decision's new status (None: the lease was lost)
    #: the run was paused already: the attempt was not charged (a ``paused`` row)
    uncharged: bool = False
    #: this failure paused the run: the reason
    paused: str | None = None


def record_failure(session: Session, failure: Failure, *, breaker: BreakerPolicy,
                   run_name: str, now: datetime) -> Recorded:
    """Record ``failure``, in ``session``'s transaction. A transient failure of a run that is
    paused is not charged. A failure of a tripping kind first looks at the run's recent
    attempts with it: when they keep failing the same way, it pauses the run (and is charged:
    it is the last), or, when another worker paused it meanwhile, it is not charged. The
    checks of one run take turns (its row is locked), so at most the window's failures are
    charged."""
    claim = failure.claim
    if failure.permanent:
        return Recorded(status=_charged(session, failure, now))
    tripping = breaker.enabled and failure.kind in TRIPPING
    if run_status_of(session, claim.run_id, lock=tripping) == RunStatus.PAUSED:
        return _uncharged(session, failure, now)
    reason = _trip_reason(session, failure, breaker, run_name) if tripping else None
    if reason is not None and not pause_run(session, claim.run_id, kind=PauseKind.BREAKER,
                                            reason=reason, now=now):
        return _uncharged(session, failure, now)  # paused by another worker meanwhile
    return Recorded(status=_charged(session, failure, now), paused=reason)


def _charged(session: Session, failure: Failure, now: datetime) -> str | None:
    return fail_decision(session, claim=failure.claim, kind=failure.kind,
                         detail=failure.detail, permanent=failure.permanent,
                         attempt=failure.attempt, max_attempts=failure.max_attempts, now=now)


def _uncharged(session: Session, failure: Failure, now: datetime) -> Recorded:
    held = release_unserved(session, claim=failure.claim, attempt=failure.attempt, now=now,
                            kind=OutcomeKind.PAUSED,
                            detail=f"{failure.kind}: {failure.detail} (run paused: not charged)")
    return Recorded(status="pending" if held else None, uncharged=True)


def _trip_reason(session: Session, failure: Failure, breaker: BreakerPolicy,
                 run_name: str) -> str | None:
    """The pause's reason when ``failure`` and the run's attempts before it fill the window
    with enough failures of one tripping kind; None otherwise."""
    recent = recent_outcomes(session, failure.claim.run_id, window=breaker.window - 1,
                             not_counted=NOT_COUNTED)
    if recent.counted + 1 < breaker.window:
        return None
    by_kind = dict(recent.by_kind)
    by_kind[failure.kind] = by_kind.get(failure.kind, 0) + 1
    kind, n = max(((k, n) for k, n in by_kind.items() if k in TRIPPING),
                  key=lambda kn: kn[1])
    if n < breaker.trip_count:
        return None
    detail = failure.detail if kind == failure.kind else recent.latest_detail.get(kind, "")
    return breaker_reason(kind, n, breaker.window, detail, run_name)


def breaker_reason(kind: str, failed: int, window: int, detail: str, run_name: str) -> str:
    """What a paused run says: how many attempts failed how (with the newest one's detail),
    what to check, and how to go on."""
    check = _CHECK.get(kind, "check the upstream")  # type: ignore[call-overload]
    shown = f" ({detail[:200]})" if detail else ""
    return (f"{failed} of the last {window} attempts failed with {kind}{shown}: {check}, "
            f"then `dreads resume {shlex.quote(run_name)}`")
