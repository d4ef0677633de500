"""Record ``/v1/systemone`` and ``/v1/decisions`` answers into a named run, so live traffic
can be reported on.

A recorded request becomes one decision of the run, written as a finished attempt through the
same store calls a worker uses (insert, claim, finish: attempts, draws and answers rows), in one
transaction. The run is created with the server's read settings; a run made with other settings
is refused before any read is spent.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime

from app.engine import Decision, ReadSettings, decision_payload, settings_hash, settings_to_dict
from app.errors import InputError
from app.runs.answer import Answered
from app.store.db import session_scope
from app.store.lookups import run_has_key
from app.store.models import RunStatus
from app.store.queue import AttemptInfo, claim_decisions, finish_decision
from app.store.runs import DecisionRow, RunInfo, ensure_run, find_run, insert_decisions
from app.store.types import Session, SessionFactory

__all__ = ["Recorder"]

SOURCE = "POST /v1/systemone"
#: The sources of runs made of recorded requests (``/v1/systemone``, ``/v1/decisions``).
RECORDING_SOURCES = ("POST /v1/systemone", "POST /v1/decisions")


@dataclass
class Recorder:
    factory: SessionFactory
    settings: ReadSettings
    upstream: str
    engine: str
    fingerprint: dict[str, object] | None = None
    _checked: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.owner = f"api:{socket.gethostname()}:{os.getpid()}"
        self.digest = settings_hash(self.settings)

    def check(self, run: str, key: str | None) -> None:
        """Before reading: the run takes this server's answers, and ``key`` is new in it.

        Raises:
            RunSettingsMismatch: the run exists with other settings.
            InputError: the decision id is already in the run.
        """
        with session_scope(self.factory, what="checking the run to record into") as session:
            if run not in self._checked:
                info = find_run(session, run)
                if info is not None:
                    self._ensure(session, run)
                    _active(_recordable(info))
                self._checked.add(run)
            if key is not None and run_has_key(session, run, key):
                raise InputError(f"decision id {key!r} is already recorded in run {run!r}; "
                                 "give each recorded request its own id, or leave it out")

    def record(self, run: str, decision: Decision, decided: Answered, *,
               started: datetime, latency_ms: float, source: str = SOURCE
               ) -> dict[str, object]:
        """Write the answered decision into ``run`` (created with ``source`` if new);
        ``{"run", "id", "decision"}``."""
        with session_scope(self.factory, what="recording the answers") as session:
            info = _recordable(_active(self._ensure(session, run, source)))
            row = DecisionRow(key=decision.id, replicate=0, cell=decision.cell, line_no=None,
                              payload=decision_payload(decision),
                              n_questions=len(decision.questions))
            inserted = insert_decisions(session, info.id, [row])
            if not inserted:
                raise InputError(f"decision id {decision.id!r} is already recorded in run "
                                 f"{run!r}")
            claim = claim_decisions(session, decision_ids=[inserted[0][0]], owner=self.owner,
                                    lease_s=60.0)[0]
            finish_decision(session, claim=claim, answers=decided.answers, draws=decided.draws,
                            attempt=AttemptInfo(worker=self.owner, n_reads=decided.n_reads,
                                                latency_ms=latency_ms, started_at=started),
                            question_ids=[q.id for q in decision.questions],
                            expected=decision.expected)
        return {"run": run, "id": decision.id, "decision": claim.id}

    def _ensure(self, session: Session, run: str, source: str = SOURCE) -> RunInfo:
        info, _ = ensure_run(session, name=run, settings=settings_to_dict(self.settings),
                             settings_hash=self.digest, upstream=self.upstream,
                             engine=self.engine, source=source, replicates=1,
                             fingerprint=self.fingerprint)
        return info


def _recordable(info: RunInfo) -> RunInfo:
    """A run that holds recorded requests only: a batch run's decisions (and the expected
    labels its report scores them by) are its job file's, never a request's."""
    if not (info.source or "").startswith(RECORDING_SOURCES):
        raise InputError(f"run {info.name!r} holds submitted decisions, not recorded requests; "
                         "record into a run of its own (another dreads.run name)")
    return info


def _active(info: RunInfo) -> RunInfo:
    if info.status == RunStatus.CANCELLED:
        raise InputError(f"run {info.name!r} was cancelled; record into another run")
    return info


