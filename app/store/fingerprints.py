"""The server fingerprint a run records at its first contact with a server: model id,
``max_model_len``, version, canvas length.

``submit`` records it when it reaches the server; a run created over HTTP before the server
answered, or by a ``submit`` that could not reach it, gets it from the first worker (or
embedded executor) that runs one of its decisions: ``record_first_fingerprint``.
"""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.engine import ServerFingerprint
from app.store.models import Run

__all__ = ["record_first_fingerprint"]


def record_first_fingerprint(session: Session, run_id: int,
                             fingerprint: ServerFingerprint) -> bool:
    """Record ``fingerprint`` on the run if it has none yet; True when this call recorded it.
    A run's fingerprint, once recorded, is never replaced (``resume`` compares against it)."""
    current = session.scalar(select(Run.fingerprint).where(Run.id == run_id)
                             .with_for_update())
    if current:
        return False
    session.execute(update(Run).where(Run.id == run_id).values(fingerprint=asdict(fingerprint)))
    return True
