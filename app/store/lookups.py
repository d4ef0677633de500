"""Small reads the runner and the API's recorder need, named for what they answer."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.store.models import Decision, Run

__all__ = ["RunHeader", "run_has_key", "run_header"]

#: A run's name, stored settings and server fingerprint (None: not recorded yet).
RunHeader = tuple[str, dict[str, Any], dict[str, Any] | None]


def run_header(session: Session, run_id: int) -> RunHeader:
    """Name, stored settings and fingerprint of run ``run_id`` (it must exist)."""
    name, settings, fingerprint = session.execute(
        select(Run.name, Run.settings, Run.fingerprint).where(Run.id == run_id)).one()
    return name, dict(settings), fingerprint


def run_has_key(session: Session, run: str, key: str) -> bool:
    """Whether run ``run`` (by name) holds a decision with id ``key``."""
    if "\x00" in run or "\x00" in key:  # no database stores one: not there
        return False
    stmt = (select(Decision.id).join(Run, Run.id == Decision.run_id)
            .where(Run.name == run, Decision.key == key).limit(1))
    return session.scalar(stmt) is not None
