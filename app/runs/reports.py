"""What a sweep and a resume did, as the CLI and the API show them. Plain values: a resume
with nothing to do prints one without loading the store's machinery."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ResumeReport", "SweepReport", "settled_report"]


@dataclass(frozen=True)
class SweepReport:
    """What one sweep (``app.runs.sweep.sweep_once``) did."""

    lost: int = 0  #: expired leases turned back to pending
    poisoned: int = 0  #: decisions stopped at the attempt cap
    published: int = 0  #: decisions whose message went out
    messages: int = 0
    skipped: bool = False  #: another sweeper held the lock
    backlog: int | None = None  #: messages waiting in the queues looked at
    error: str | None = None  #: why publishing stopped, if it did
    broker_lost: bool = False  #: the broker had lost its data: every queued decision re-sent

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ResumeReport:
    """What a resume (``app.runs.resume.resume_run``) found and did."""

    run: str
    dry_run: bool
    before: dict[str, int]  #: expired leases, failed, pending, stale queued (resume_preview)
    retried: int = 0
    sweep: SweepReport | None = None
    server_note: str | None = None
    #: the run was paused (the breaker) and now goes on: why it had paused
    unpaused: str | None = None

    def as_dict(self) -> dict[str, Any]:
        sweep = self.sweep.as_dict() if self.sweep is not None else None
        return {"run": self.run, "dry_run": self.dry_run, "before": self.before,
                "retried_failed": self.retried, "sweep": sweep, "server": self.server_note,
                "unpaused": self.unpaused}

    def lines(self) -> list[str]:
        b = self.before
        found = (f"run {self.run!r}: {b['pending']} pending, {b['stale_queued']} queued without "
                 f"a live message, {b['expired_leases']} expired lease(s), {b['failed']} failed")
        out = [found] + ([self.server_note] if self.server_note else [])
        if self.dry_run:
            return [*out, "dry run: nothing changed"]
        if self.unpaused:
            out.append(f"the run was paused ({self.unpaused}); it goes on")
        if self.retried:
            out.append(f"{self.retried} failed decision(s) put back to pending")
        s = self.sweep
        if s is not None:
            out.append(f"swept: {s.lost} lost lease(s) back to pending, {s.poisoned} stopped at "
                       f"the attempt cap; published {s.published} decision(s) in {s.messages} "
                       "message(s)")
            if s.error:
                out.append(f"publish stopped: {s.error}")
        return out


def settled_report(run: str, dry_run: bool) -> ResumeReport:
    """The report of a resume with nothing to do: every decision of ``run`` is settled."""
    return ResumeReport(run=run, dry_run=dry_run,
                        before=dict.fromkeys(("expired_leases", "failed", "pending",
                                              "stale_queued"), 0),
                        sweep=None if dry_run else SweepReport(),
                        server_note="every decision is settled: nothing to resume")
