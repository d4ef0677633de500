"""The files runs were submitted from (``run_sources``): recorded at submit, read by the
commands that write a user's file, so that none of them writes over a run's job file."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.store import dialects
from app.store.models import Run, RunSource

__all__ = ["record_sources", "source_files"]

_RECORD = dialects.insert_ignoring(RunSource, ["run_id", "path"])


def record_sources(session: Session, run_id: int, paths: Iterable[str]) -> None:
    """Record ``paths`` (resolved absolute paths) as files run ``run_id`` was submitted from;
    a file recorded already is left as it is."""
    rows = [{"run_id": run_id, "path": path} for path in dict.fromkeys(paths)]
    if rows:
        session.execute(_RECORD[dialects.name(session)], rows)


def source_files(session: Session, run: str | None = None) -> list[tuple[str, str]]:
    """(run name, path) of every file every run of the store (or only ``run``) was submitted
    from."""
    stmt = (select(Run.name, RunSource.path).join(RunSource, RunSource.run_id == Run.id)
            .order_by(Run.name, RunSource.path))
    if run is not None:
        stmt = stmt.where(Run.name == run)
    return [(name, path) for name, path in session.execute(stmt)]
