"""When the broker's current data began, and the re-publishing of what it lost.

The broker's epoch (``dreads:broker:epoch``, database time, set with NX by whoever finds it
missing) marks when its current data began: a decision stamped queued before it was published
to data that is gone (a FLUSHDB, a Redis restarted without persistence), and the next sweep
re-publishes it. Each run's progress in that recovery is kept in the broker itself, so a
recovery cut short goes on where it stopped, and a new loss takes the progress along with the
messages.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from app.broker.names import (
    BROKER_EPOCH_KEY,
    BROKER_RECOVERED_AT_KEY,
    BROKER_RECOVERED_KEY,
    BROKER_RECOVERY_PREFIX,
)
from app.errors import PublishError

__all__ = ["BrokerEpoch", "broker_epoch", "broker_unreachable", "mark_recovered",
           "record_recovery_progress", "recovery_progress"]

log = logging.getLogger("dreads.broker")


def broker_unreachable(exc: Exception) -> PublishError:
    """The error of a broker that could not be reached (a foreign redis/kombu error)."""
    return PublishError(
        f"the broker is unreachable ({type(exc).__name__}: {exc}); the decisions stay in SQL "
        "and are published by the sweeper or `dreads resume` once it is back"
    )


@dataclass(frozen=True)
class BrokerEpoch:
    """When the broker's current data began (database clock, epoch seconds), the epoch whose
    lost messages were all re-published (None: not yet), and when that recovery ended."""

    since: float
    recovered: float | None
    recovered_at: float | None = None

    @property
    def needs_recovery(self) -> bool:
        return self.recovered != self.since

    def recovered_after(self, moment: float) -> bool:
        """This epoch's lost decisions were re-published at or after ``moment`` (or are being
        re-published now)."""
        return self.needs_recovery or (self.recovered_at is not None
                                       and self.recovered_at >= moment)


def broker_epoch(celery_app: Any, now_s: float) -> BrokerEpoch:
    """Read the broker's epoch, starting one at ``now_s`` when there is none (a new broker,
    or one that lost its data: every message published before then is gone).

    Raises PublishError when the broker is unreachable.
    """
    try:
        with celery_app.connection_for_write() as conn:
            client = conn.default_channel.client
            client.set(BROKER_EPOCH_KEY, repr(now_s), nx=True)
            since, recovered, recovered_at = client.mget(
                BROKER_EPOCH_KEY, BROKER_RECOVERED_KEY, BROKER_RECOVERED_AT_KEY)
    except Exception as exc:  # redis/kombu errors are foreign: translated here
        raise broker_unreachable(exc) from exc
    return BrokerEpoch(float(since), _float_or_none(recovered), _float_or_none(recovered_at))


def _float_or_none(raw: bytes | None) -> float | None:
    return float(raw) if raw is not None else None


def mark_recovered(celery_app: Any, epoch: BrokerEpoch, now_s: float) -> None:
    """Record that every decision queued before ``epoch.since`` was published again, at
    ``now_s`` (only while that epoch is still the broker's: a newer loss keeps its own
    recovery due)."""
    try:
        with celery_app.connection_for_write() as conn:
            client = conn.default_channel.client
            if client.get(BROKER_EPOCH_KEY) == repr(epoch.since).encode():
                client.mset({BROKER_RECOVERED_KEY: repr(epoch.since),
                             BROKER_RECOVERED_AT_KEY: repr(now_s)})
    except Exception:  # the next sweep redoes the (idempotent) recovery
        log.warning("could not record the broker recovery", exc_info=True)


#: How long a run's recovery progress is kept in the broker (a recovery takes seconds; the
#: key only has to outlive a sweeper that was cut short).
RECOVERY_PROGRESS_TTL_S = 7 * 24 * 3600


def _progress_key(epoch: BrokerEpoch, run_id: int) -> str:
    return f"{BROKER_RECOVERY_PREFIX}{epoch.since!r}:{run_id}"


def recovery_progress(celery_app: Any, epoch: BrokerEpoch, run_id: int) -> int:
    """The last decision id of run ``run_id`` re-published for ``epoch`` (0: none yet).

    Raises PublishError when the broker is unreachable.
    """
    try:
        with celery_app.connection_for_read() as conn:
            raw = conn.default_channel.client.get(_progress_key(epoch, run_id))
    except Exception as exc:
        raise broker_unreachable(exc) from exc
    return int(raw) if raw is not None else 0


def record_recovery_progress(celery_app: Any, epoch: BrokerEpoch, run_id: int,
                             through_id: int) -> None:
    """Every decision of run ``run_id`` up to ``through_id`` lost with the broker before
    ``epoch`` was published again.

    Raises PublishError when the broker is unreachable.
    """
    try:
        with celery_app.connection_for_write() as conn:
            conn.default_channel.client.set(_progress_key(epoch, run_id), str(through_id),
                                            ex=RECOVERY_PROGRESS_TTL_S)
    except Exception as exc:
        raise broker_unreachable(exc) from exc
