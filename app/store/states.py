"""A run's state and its counts: the one definition every view uses.

``dreads status``, ``dreads runs``, ``dreads report``, the API, ``/metrics`` and the live
page all show a run through these functions, so they say the same thing about it.

Decision statuses (``DecisionStatus``, the ``decisions.status`` column):

    open      pending, queued, leased     still to run, or running
    settled   done, failed, rejected,     ended: no answer is coming any more
              cancelled

A cancelled run's pending and queued rows are cancelled as far as a user is concerned
(``shown_status``), though the sweeper rewrites them only a page at a time.

The run's state (``RunState``) is derived, never stored on its own. ``runs.status``
(``RunStatus``) records only whether someone cancelled the run, or it paused:

    cancelled   the run was cancelled: no decision of it starts any more
    finished    not cancelled, and every decision is settled
    paused      not cancelled, a decision is still open, and the run paused (the breaker
                tripped; ``runs.pause_reason`` says why): no decision of it starts until
                ``resume``
    active      neither, and a decision is still open (or none is stored yet)

Counts: ``done``, ``failed``, ``rejected``, ``cancelled`` are decisions by shown status;
``remaining`` are open decisions; ``unanswered`` are questions of settled decisions with no
answer (failed, rejected, cancelled, or refused by a decision endpoint). A question of an
open decision is neither answered nor unanswered: it is in flight. A run has ended when
nothing about it changes any more: finished, or cancelled with nothing left in flight.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from app.store.records import DecisionStatus, RunInfo, RunStatus

__all__ = ["NOT_STARTED", "OPEN", "SETTLED", "RunState", "has_ended", "is_unanswered",
           "pause_view", "quoted", "run_state", "settled_statuses", "shown_status",
           "unanswered_count"]

#: What no worker has started: cancelling a run cancels these.
NOT_STARTED = (DecisionStatus.PENDING, DecisionStatus.QUEUED)
#: What is still to run or running.
OPEN = (DecisionStatus.PENDING, DecisionStatus.QUEUED, DecisionStatus.LEASED)
#: What has ended: no answer is coming any more.
SETTLED = (DecisionStatus.DONE, DecisionStatus.FAILED, DecisionStatus.REJECTED,
           DecisionStatus.CANCELLED)


class RunState(StrEnum):
    ACTIVE = "active"  #: a decision is still open (or none is stored yet)
    FINISHED = "finished"  #: every decision is settled (done, failed, rejected)
    CANCELLED = "cancelled"  #: cancelled: no decision of it starts any more
    PAUSED = "paused"  #: paused (``runs.pause_reason``): nothing starts until ``resume``


def shown_status(status: str, run_status: str) -> str:
    """A decision's status as a user sees it. ``cancel`` marks the run at once (no worker
    takes its decisions from then on) and leaves the rows no worker started to the sweeper,
    which settles them a page at a time: they are cancelled already, whatever the row says."""
    if run_status == RunStatus.CANCELLED and status in NOT_STARTED:
        return DecisionStatus.CANCELLED.value  # plain text, as read from SQL
    return status


def settled_statuses(run_status: str) -> tuple[str, ...]:
    """The ``decisions.status`` values that count as settled in a run whose ``runs.status``
    is ``run_status`` (a cancelled run's not-started rows are)."""
    if run_status == RunStatus.CANCELLED:
        return (*SETTLED, *NOT_STARTED)
    return SETTLED


def run_state(run_status: str, counts: Mapping[str, int]) -> RunState:
    """The run's state from its ``runs.status`` and its decisions by status."""
    if run_status == RunStatus.CANCELLED:
        return RunState.CANCELLED
    if sum(counts.values()) and not any(counts.get(s, 0) for s in OPEN):
        return RunState.FINISHED
    if run_status == RunStatus.PAUSED:
        return RunState.PAUSED
    return RunState.ACTIVE


def pause_view(run: RunInfo, state: RunState) -> dict[str, Any] | None:
    """A paused run's pause as every view shows it: what paused it (``PauseKind``), why and
    what to check (``reason``), and since when; None when the run is not paused."""
    if state is not RunState.PAUSED:
        return None
    return {"kind": run.pause_kind, "reason": run.pause_reason,
            "since": run.paused_at.isoformat() if run.paused_at else None}


def has_ended(state: RunState, remaining: int) -> bool:
    """Nothing about the run changes any more: it is finished, or cancelled with no decision
    left in flight (``remaining``: its open decisions). A paused run has not ended: its open
    decisions wait for ``resume``."""
    return state in (RunState.FINISHED, RunState.CANCELLED) and remaining == 0


def is_unanswered(*, answered: bool, shown: str) -> bool:
    """A question with no answer and none coming: its decision (status ``shown``, as
    ``shown_status`` gives it) is settled."""
    return not answered and shown in SETTLED


def unanswered_count(*, settled_questions: int, answered: int) -> int:
    """Questions of settled decisions less the answers they have: ``is_unanswered`` counted
    in SQL."""
    return max(settled_questions - answered, 0)


def quoted(values: Iterable[str]) -> str:
    """``'a', 'b'``: statuses or outcome kinds (constants of ours, never input) for a SQL
    ``IN`` list, in one order so the statement text is the same each time."""
    return ", ".join(f"'{v}'" for v in sorted(values))
