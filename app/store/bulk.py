"""A new run's decisions laid out for PostgreSQL's COPY before they are written.

``dreads submit`` of a run it creates knows that the run holds no row but its own, so each
batch can go straight into ``decisions`` and ``decision_payloads`` with COPY (no staging
table, no INSERT ... SELECT). The ids are drawn from the table's sequence first, in a
transaction of their own, so the COPY text of both tables is built in the thread that parses
the file while the writing thread only streams bytes and commits: the database's work on a
batch overlaps the parsing and laying out of the next.

    batch = lay_out(session, run_id, rows, status="queued")   # parsing thread (None: SQLite)
    won = write_laid_out(session, batch)                      # writing thread, in its transaction

A batch holding a row whose (run, key, replicate) is already there (a line repeated in the
file) is rolled back to its savepoint and written the way that skips such rows
(``app.store.runs.insert_decisions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson
from sqlalchemy.orm import Session

from app.store import dialects
from app.store.models import DecisionStatus, OutcomeKind
from app.store.runs import DecisionRow, first_of_each, insert_decisions, record_rejections

__all__ = ["LaidOut", "copy_laid_out", "copy_text", "decisions_copy", "lay_out",
           "payloads_copy", "write_laid_out"]

#: The columns of ``decisions`` a laid-out batch fills (the rest take their defaults).
DECISION_COLUMNS = ("id", "run_id", "key", "replicate", "cell", "line_no", "n_questions",
                    "content_hash", "status", "attempts", "last_error_kind", "last_error",
                    "finished_at", "enqueued_at")
_DRAW_IDS = ("SELECT nextval(pg_get_serial_sequence('decisions', 'id')) "
             "FROM generate_series(1, %s)")
#: The timestamp input 'now' is read by PostgreSQL as the transaction's start: ``now()``.
_NOW = "now"
_NULL = "\\N"
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


@dataclass(frozen=True)
class LaidOut:
    """One batch of a run's rows with their ids, and the COPY text of both tables."""

    run_id: int
    status: str  #: of the readable rows
    rows: tuple[DecisionRow, ...]
    ids: tuple[int, ...]
    decisions: bytes
    payloads: bytes


def copy_text(value: str | int | None) -> str:
    """One field in COPY's text format: ``\\N`` for NULL, backslash, tab and line ends
    escaped."""
    if value is None:
        return _NULL
    if isinstance(value, int):
        return str(value)
    return _escaped(value)


def _escaped(text: str) -> str:
    # looking is several times cheaper than translating, and almost no key needs it
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_ESCAPES)
    return text


def decisions_copy(run_id: int, rows: Sequence[DecisionRow], ids: Sequence[int],
                   status: str) -> bytes:
    """COPY text of ``rows`` (with ``ids``) for ``DECISION_COLUMNS``: readable rows in
    ``status`` (stamped now when queued), rejected ones rejected with their reason."""
    readable = f"\t{status}\t0\t{_NULL}\t{_NULL}\t{_NULL}\t"
    readable += (_NOW if status == DecisionStatus.QUEUED else _NULL) + "\n"
    rejected = f"\t{DecisionStatus.REJECTED.value}\t0\t{OutcomeKind.REJECTED.value}\t"
    cells: dict[str | None, str] = {None: _NULL}  # a file has few cells
    lines = []
    for did, row in zip(ids, rows, strict=True):
        cell = cells.get(row.cell)
        if cell is None:
            cell = cells[row.cell] = _escaped(row.cell)  # type: ignore[arg-type]
        head = (f"{did}\t{run_id}\t{_escaped(row.key)}\t{row.replicate}\t{cell}\t"
                f"{copy_text(row.line_no)}\t{row.n_questions}\t{copy_text(row.content_hash)}")
        if row.rejected_reason is None:
            lines.append(head + readable)
        else:
            lines.append(f"{head}{rejected}{_escaped(row.rejected_reason)}\t{_NOW}\t{_NULL}\n")
    return "".join(lines).encode()


def payloads_copy(rows: Sequence[DecisionRow], ids: Sequence[int]) -> bytes:
    """COPY text of ``decision_payloads``: the id and the payload as JSON. orjson escapes
    every control character, so only its backslashes need doubling for COPY."""
    dumps = orjson.dumps
    parts = []
    for did, row in zip(ids, rows, strict=True):
        data = dumps(row.payload)
        if b"\\" in data:
            data = data.replace(b"\\", b"\\\\")
        parts.append(b"%d\t%b\n" % (did, data))
    return b"".join(parts)


def lay_out(session: Session, run_id: int, rows: Sequence[DecisionRow],
            status: str) -> LaidOut | None:
    """Draw ids for ``rows`` in ``session`` and lay them out for COPY (None: the store is not
    PostgreSQL, or there is nothing to write). Repeated (key, replicate) pairs keep their
    first row. Sequences are not transactional: the ids are ours whether or not the caller's
    transaction commits, and ids drawn for rows that end up not written are never used."""
    unique = tuple(first_of_each(rows))
    if not unique or not dialects.is_postgresql(session):
        return None
    with dialects.driver_connection(session).cursor() as cur:
        ids = tuple(i for (i,) in cur.execute(_DRAW_IDS, (len(unique),)).fetchall())
    return LaidOut(run_id, status, unique, ids, decisions_copy(run_id, unique, ids, status),
                   payloads_copy(unique, ids))


def write_laid_out(session: Session, batch: LaidOut) -> list[tuple[int, DecisionRow]]:
    """Write ``batch`` in ``session``'s transaction: (id, row) of the rows written. COPY, or
    where a row is already there, the insert that skips it (and keeps the others)."""
    written = copy_laid_out(session, batch)
    if written is None:
        return insert_decisions(session, batch.run_id, batch.rows, batch_size=len(batch.rows),
                                status=batch.status)
    record_rejections(session, batch.run_id, written)
    return written


def copy_laid_out(session: Session, batch: LaidOut) -> list[tuple[int, DecisionRow]] | None:
    """COPY ``batch`` into both tables in a savepoint of ``session``'s transaction; (id,
    row) of every row, or None when one of them is already there (nothing was written)."""
    from psycopg.errors import UniqueViolation

    raw = dialects.driver_connection(session)
    try:
        with raw.transaction(), raw.cursor() as cur:
            columns = ", ".join(DECISION_COLUMNS)
            with cur.copy(f"COPY decisions ({columns}) FROM STDIN") as copy:
                copy.write(batch.decisions)
            with cur.copy("COPY decision_payloads (decision_id, payload) FROM STDIN") as copy:
                copy.write(batch.payloads)
    except UniqueViolation:
        return None
    return list(zip(batch.ids, batch.rows, strict=True))
