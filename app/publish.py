"""Chunk decision ids into queue messages and publish them by task name (``send_task``).

Used by the producer (after its insert commits) and by the sweeper. Messages carry ids only;
the worker re-reads everything from SQL. Publishing never imports ``workers.tasks``: the task is
addressed by name, so the producer and the API need no worker code.

A run's chunks go to the queue of its served identity (``app.queues.queue_for``: model
and canvas), which only workers whose upstream serves them consume. The broker's epoch
(``broker_epoch``) tells a sweeper that the broker lost its data since a decision was stamped
queued.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Any, Protocol

from app.errors import DreadsError, OutcomeKind
from app.queues import (
    BROKER_EPOCH_KEY,
    BROKER_RECOVERED_AT_KEY,
    BROKER_RECOVERED_KEY,
    BROKER_RECOVERY_PREFIX,
    QUEUE,
    TASK_RUN_CHUNK,
    queue_for,
)

__all__ = ["BrokerEpoch", "PublishError", "RunPublisher", "Sender", "broker_epoch", "chunk_ids",
           "make_publisher", "make_sender", "mark_recovered", "publish_chunks", "queue_backlog",
           "queue_for", "record_recovery_progress", "recovery_progress"]

log = logging.getLogger("dreads.publish")


class PublishError(DreadsError):
    """The broker did not take a message: rows stay pending/queued for the sweeper."""

    kind = OutcomeKind.PUBLISH_ERROR


class Sender(Protocol):
    """What ``publish_chunks`` needs: a Celery app, or anything with the same ``send_task``."""

    def send_task(self, name: str, args: Any = None, **options: Any) -> Any: ...


def chunk_ids(decision_ids: Sequence[int], chunk_size: int) -> Iterator[tuple[int, ...]]:
    """Split ids into chunks of at most ``chunk_size`` (the order is kept)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    it = iter(decision_ids)
    while chunk := tuple(islice(it, chunk_size)):
        yield chunk


def publish_chunks(celery_app_or_sender: Sender, run_id: int, decision_ids: Sequence[int],
                   chunk_size: int, *, run_name: str | None = None,
                   queue: str = QUEUE) -> int:
    """Publish one ``reads.run_chunk`` message per chunk to ``queue``; return the number of
    messages.

    Raises PublishError when the broker is unreachable (after Celery's publish retries); the
    messages already sent stay sent, and the rest are picked up by the sweeper.
    """
    label = run_name or str(run_id)
    sent = 0
    with _producer(celery_app_or_sender, queue) as producer, _batched(producer, label):
        for chunk in chunk_ids(decision_ids, chunk_size):
            _send(celery_app_or_sender, producer, run_id, chunk, label, queue)
            sent += 1
    if sent:
        log.debug("published %d chunk(s) of run %s", sent, label)
    return sent


#: Messages buffered in one Redis pipeline before it is sent (kombu's ``Producer.batch``).
PUBLISH_BATCH = 256


@contextmanager
def _batched(producer: Any, label: str) -> Iterator[None]:
    """Publish through one non-transactional Redis pipeline per ``PUBLISH_BATCH`` messages
    (kombu's ``Producer.batch``), not one round trip each: half the CPU per message on both
    sides, for the 15,625 messages of a million-decision run. A transport that cannot batch
    publishes at once. A pipeline that fails may have delivered part of its messages: the
    caller treats the whole call as not published (the rows go back to pending, and a message
    that did go out is a duplicate, which a claim makes harmless)."""
    batch = getattr(producer, "batch", None)
    if batch is None or not getattr(producer, "supports_batch_publish", False):
        yield
        return
    try:
        with batch(max_size=PUBLISH_BATCH):
            yield
    except PublishError:
        raise
    except Exception as exc:  # kombu's BatchPublishError at a flush, a redis error
        raise PublishError(
            f"could not publish the chunks of run {label} to the broker ({type(exc).__name__}: "
            f"{exc}); the decisions stay in SQL and the sweeper (or `dreads resume`) publishes "
            "them once the broker is back"
        ) from exc


def _send(sender: Sender, producer: Any, run_id: int, chunk: tuple[int, ...],
          label: str, queue: str) -> None:
    options: dict[str, Any] = {
        "queue": queue,
        "argsrepr": f"run={label} chunk={chunk[0]}..{chunk[-1]} n={len(chunk)}",
    }
    if producer is not None:
        options["producer"] = producer
    try:
        sender.send_task(TASK_RUN_CHUNK, args=(run_id, list(chunk)), **options)
    except Exception as exc:  # kombu/redis errors are foreign: translate them here, once
        raise PublishError(
            f"could not publish a chunk of run {label} to the broker ({type(exc).__name__}: "
            f"{exc}); the decisions stay in SQL and the sweeper (or `dreads resume`) publishes "
            "them once the broker is back"
        ) from exc


@contextmanager
def _producer(sender: Sender, queue: str) -> Iterator[Any]:
    """One pooled producer for the whole publish, and the queue (re)declared on it.

    Declaring matters after Redis lost its keys: without the binding set kombu drops a
    published message silently, and a running worker does not declare it again.
    """
    acquire = getattr(sender, "producer_or_acquire", None)
    if acquire is None:
        yield None
        return
    try:
        ctx = acquire()
        producer = ctx.__enter__()
    except Exception as exc:
        raise _unreachable(exc) from exc
    try:
        try:
            # an unknown name is created on lookup (task_create_missing_queues)
            sender.amqp.queues[queue](producer.channel).declare()  # type: ignore[attr-defined]
        except Exception as exc:
            raise _unreachable(exc) from exc
        yield producer
    finally:
        ctx.__exit__(None, None, None)


def _unreachable(exc: Exception) -> PublishError:
    return PublishError(
        f"the broker is unreachable ({type(exc).__name__}: {exc}); the decisions stay in SQL "
        "and are published by the sweeper or `dreads resume` once it is back"
    )


def queue_backlog(celery_app: Any, queue: str = QUEUE) -> int | None:
    """Messages waiting in ``queue`` (Redis LLEN), or None when it cannot be read."""
    try:
        with celery_app.connection_for_read() as conn:
            return int(conn.default_channel.client.llen(queue))
    except Exception:  # a best-effort hint for the sweeper, never an error
        log.debug("could not read the queue length", exc_info=True)
        return None


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
        raise _unreachable(exc) from exc
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
        raise _unreachable(exc) from exc
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
        raise _unreachable(exc) from exc


@contextmanager
def make_sender(broker: str | None) -> Iterator[Any]:
    """The send-only Celery client publishing to ``broker`` (default ``DREADS_BROKER_URL``),
    closed after."""
    from app.broker import make_client
    from app.config import get_settings

    celery = make_client(get_settings(), broker_url=broker)
    try:
        yield celery
    finally:
        celery.close()


class RunPublisher:
    """Publishes one run's chunks to its queue (``app.producer.Publisher``)."""

    def __init__(self, sender: Any, chunk_size: int, *, run_name: str, queue: str) -> None:
        self.sender = sender
        self.chunk_size = chunk_size
        self.run_name = run_name
        self.queue = queue

    def start(self, now_s: float) -> None:
        """Before the first message: make sure the broker has an epoch, so a sweeper does not
        take these messages for ones the broker lost (raises PublishError)."""
        broker_epoch(self.sender, now_s)

    def __call__(self, run_id: int, decision_ids: Sequence[int]) -> int:
        return publish_chunks(self.sender, run_id, decision_ids, self.chunk_size,
                              run_name=self.run_name, queue=self.queue)


def make_publisher(sender: Any, chunk_size: int | None, *, run_name: str,
                   queue: str) -> RunPublisher:
    """The publisher of run ``run_name``'s chunks (``chunk_size`` default
    ``DREADS_CHUNK_SIZE``) to ``queue`` through ``sender``."""
    if chunk_size is None:
        from app.config import get_settings

        chunk_size = get_settings().chunk_size
    return RunPublisher(sender, chunk_size, run_name=run_name, queue=queue)
