"""A line submitted again under an id its run holds: what is stored under that id, and the
replacement of a decision not started yet (``submit --replace-changed``).

    stored = stored_lines(session, run_id, keys)        # id, line, content hash (or None)
    payloads = stored_contents(session, ids)             # cell and payload, for rows without one
    outcome = replace_unstarted(session, run_id, rows)   # the new content, where not started

A decision is replaced only while every replicate of it is ``pending`` or ``queued``: nothing
has read it, and a worker's claim (``SKIP LOCKED``) passes over the rows locked here until the
replacement commits, then reads the new payload. Its attempt budget starts again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.store.models import Decision, DecisionPayload, DecisionStatus, OutcomeKind
from app.store.runs import DecisionRow, record_rejections
from app.store.states import NOT_STARTED

__all__ = ["REPLACEABLE", "Replacement", "StoredLine", "replace_unstarted", "stored_contents",
           "stored_lines"]

#: The statuses of a decision nothing has read yet: its content may be replaced.
REPLACEABLE = NOT_STARTED


class StoredLine(NamedTuple):
    """What a run holds under a key (its replicate 0)."""

    id: int
    line_no: int | None
    content_hash: str | None  #: None: written before content hashes were kept


class Replacement(NamedTuple):
    replaced: list[str]  #: keys whose decisions now ask the new content
    kept: dict[str, str]  #: key -> the status that kept it (a replicate started or settled)


def stored_lines(session: Session, run_id: int, keys: Sequence[str]) -> dict[str, StoredLine]:
    """Key -> the replicate-0 row of each of ``keys`` already in run ``run_id``."""
    stmt = select(Decision.key, Decision.id, Decision.line_no, Decision.content_hash).where(
        Decision.run_id == run_id, Decision.replicate == 0, Decision.key.in_(list(keys)))
    return {key: StoredLine(int(did), line, digest) for key, did, line, digest
            in session.execute(stmt)}


def stored_contents(session: Session,
                    ids: Sequence[int]) -> dict[int, tuple[str | None, dict[str, Any]]]:
    """Decision id -> (cell, payload): what the decisions ``ids`` ask."""
    stmt = (select(Decision.id, Decision.cell, DecisionPayload.payload)
            .join(DecisionPayload, DecisionPayload.decision_id == Decision.id)
            .where(Decision.id.in_(list(ids))))
    return {int(did): (cell, payload) for did, cell, payload in session.execute(stmt)}


def replace_unstarted(session: Session, run_id: int,
                      rows: Sequence[DecisionRow]) -> Replacement:
    """Write ``rows`` (one per key and replicate) over the stored decisions of their keys whose
    every replicate is still ``pending`` or ``queued``; the others are kept, with the status
    that kept them."""
    keys = sorted({row.key for row in rows})
    current = _lock_rows(session, run_id, keys)
    kept = {key: _settled_status(found) for key, found in current.items()
            if any(status not in REPLACEABLE for _, _, status in found)}
    by_slot = {(key, rep): rid for key, found in current.items() if key not in kept
               for rid, rep, _ in found}
    written = [(by_slot[(row.key, row.replicate)], row) for row in rows
               if (row.key, row.replicate) in by_slot]
    _rewrite(session, written)
    record_rejections(session, run_id, written)
    return Replacement(sorted({row.key for _, row in written}), kept)


def _lock_rows(session: Session, run_id: int,
               keys: Sequence[str]) -> dict[str, list[tuple[int, int, str]]]:
    """Key -> (id, replicate, status) of every row of ``keys``, locked until the commit."""
    stmt = (select(Decision.key, Decision.id, Decision.replicate, Decision.status)
            .where(Decision.run_id == run_id, Decision.key.in_(list(keys)))
            .order_by(Decision.id).with_for_update(of=Decision))
    found: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for key, did, replicate, status in session.execute(stmt):
        found[key].append((int(did), int(replicate), str(status)))
    return found


def _settled_status(found: Sequence[tuple[int, int, str]]) -> str:
    """The status that keeps a decision: ``done`` if one replicate is, else the first other."""
    statuses = [status for _, _, status in found if status not in REPLACEABLE]
    return DecisionStatus.DONE.value if DecisionStatus.DONE in statuses else statuses[0]


def _rewrite(session: Session, written: Sequence[tuple[int, DecisionRow]]) -> None:
    if not written:
        return
    now = datetime.now(UTC)
    session.execute(update(Decision), [_row_update(rid, row, now) for rid, row in written])
    session.execute(update(DecisionPayload), [
        {"decision_id": rid, "payload": dict(row.payload)} for rid, row in written])


def _row_update(rid: int, row: DecisionRow, now: datetime) -> Mapping[str, Any]:
    """The new content of one row, and its status: still waiting, or rejected now."""
    values: dict[str, Any] = {
        "id": rid, "cell": row.cell, "line_no": row.line_no, "n_questions": row.n_questions,
        "content_hash": row.content_hash, "attempts": 0, "last_error_kind": None,
        "last_error": None}
    if row.rejected_reason is not None:
        values.update(status=DecisionStatus.REJECTED, last_error_kind=OutcomeKind.REJECTED,
                      last_error=row.rejected_reason, finished_at=now, enqueued_at=None)
    return values
