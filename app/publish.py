"""Chunk decision ids into queue messages and publish them by task name (``send_task``).

Used by the producer (after its insert commits) and by the sweeper. Messages carry ids only;
the worker re-reads everything from SQL. Publishing never imports ``workers.tasks``: the task is
addressed by name, so the producer and the API need no worker code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import Any, Protocol

from app.config import get_settings
from app.errors import DreadsError
from workers.constants import QUEUE, TASK_RUN_CHUNK

__all__ = ["PublishError", "Sender", "chunk_ids", "make_publisher", "make_sender", "publish_chunks",
           "queue_backlog"]

log = logging.getLogger("dreads.publish")


class PublishError(DreadsError):
    """The broker did not take a message: rows stay pending/queued for the sweeper."""

    kind = "publish_error"


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
                   chunk_size: int, *, run_name: str | None = None) -> int:
    """Publish one ``reads.run_chunk`` message per chunk; return the number of messages.

    Raises PublishError when the broker is unreachable (after Celery's publish retries); the
    messages already sent stay sent, and the rest are picked up by the sweeper.
    """
    label = run_name or str(run_id)
    sent = 0
    with _producer(celery_app_or_sender) as producer:
        for chunk in chunk_ids(decision_ids, chunk_size):
            _send(celery_app_or_sender, producer, run_id, chunk, label)
            sent += 1
    if sent:
        log.debug("published %d chunk(s) of run %s", sent, label)
    return sent


def _send(sender: Sender, producer: Any, run_id: int, chunk: tuple[int, ...],
          label: str) -> None:
    options: dict[str, Any] = {
        "queue": QUEUE,
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
def _producer(sender: Sender) -> Iterator[Any]:
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
            sender.amqp.queues[QUEUE](producer.channel).declare()  # type: ignore[attr-defined]
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


def queue_backlog(celery_app: Any) -> int | None:
    """Messages waiting in the dreads queue (Redis LLEN), or None when it cannot be read."""
    try:
        with celery_app.connection_for_read() as conn:
            return int(conn.default_channel.client.llen(QUEUE))
    except Exception:  # a best-effort hint for the sweeper, never an error
        log.debug("could not read the queue length", exc_info=True)
        return None


@contextmanager
def make_sender(broker: str | None) -> Iterator[Any]:
    """The Celery app publishing to ``broker`` (default ``DREADS_BROKER_URL``), closed after."""
    from workers.celery_app import make_celery

    celery = make_celery(broker_url=broker or get_settings().broker_url)
    try:
        yield celery
    finally:
        celery.close()


def make_publisher(sender: Any, chunk_size: int | None, *,
                   run_name: str) -> Callable[[int, Sequence[int]], int]:
    """``publisher(run_id, ids)`` sending ``reads.run_chunk`` messages through ``sender``."""
    size = chunk_size or get_settings().chunk_size

    def publish(run_id: int, ids: Sequence[int]) -> int:
        return publish_chunks(sender, run_id, ids, size, run_name=run_name)

    return publish
