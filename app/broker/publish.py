"""Decision ids into chunk messages, published by task name (``send_task``).

Used by submit (after its insert commits) and by the sweeper. Messages carry ids only; the
worker re-reads everything from SQL. Publishing never imports ``workers.tasks``: the task is
addressed by name, so submit and the API need no worker code.

A run's chunks go to the queue of its served identity (``app.broker.names.queue_of_run``:
model and canvas), which only workers whose upstream serves them consume.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import Any, Protocol

from app.broker.epoch import broker_epoch, broker_unreachable
from app.broker.names import QUEUE, TASK_RUN_CHUNK
from app.errors import PublishError

__all__ = ["PublishError", "RunPublisher", "Sender", "chunk_ids", "chunk_repr", "publish_chunks",
           "queue_backlog"]

log = logging.getLogger("dreads.publish")


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
                   queue: str = QUEUE, first_chunk: int = 1, by: str | None = None) -> int:
    """Publish one ``reads.run_chunk`` message per chunk to ``queue``; return the number of
    messages. Each message's ``argsrepr`` (what Flower and the worker's events show for its
    arguments) names the run and the chunk, numbered from ``first_chunk``: ``run=R chunk=3
    (40 decisions)``, with ``by`` after the count when given (``sweeper``).

    Raises PublishError when the broker is unreachable (after Celery's publish retries); the
    messages already sent stay sent, and the rest are picked up by the sweeper.
    """
    label = run_name or str(run_id)
    sent = 0
    with _producer(celery_app_or_sender, queue) as producer, _batched(producer, label):
        for chunk in chunk_ids(decision_ids, chunk_size):
            shown = chunk_repr(label, first_chunk + sent, len(chunk), by=by)
            _send(celery_app_or_sender, producer, run_id, chunk, (label, shown), queue)
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


def chunk_repr(run: str, number: int, size: int, *, by: str | None = None) -> str:
    """A chunk message's ``argsrepr``: ``run=R chunk=N (K decisions[, by])``."""
    what = f"{size} decision{'' if size == 1 else 's'}" + (f", {by}" if by else "")
    return f"run={run} chunk={number} ({what})"


def _send(sender: Sender, producer: Any, run_id: int, chunk: tuple[int, ...],
          shown: tuple[str, str], queue: str) -> None:
    label, argsrepr = shown
    options: dict[str, Any] = {"queue": queue, "argsrepr": argsrepr}
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
        raise broker_unreachable(exc) from exc
    try:
        try:
            # an unknown name is created on lookup (task_create_missing_queues)
            sender.amqp.queues[queue](producer.channel).declare()  # type: ignore[attr-defined]
        except Exception as exc:
            raise broker_unreachable(exc) from exc
        yield producer
    finally:
        ctx.__exit__(None, None, None)


def queue_backlog(celery_app: Any, queue: str = QUEUE) -> int | None:
    """Messages waiting in ``queue`` (Redis LLEN), or None when it cannot be read."""
    try:
        with celery_app.connection_for_read() as conn:
            return int(conn.default_channel.client.llen(queue))
    except Exception:  # a best-effort hint for the sweeper, never an error
        log.debug("could not read the queue length", exc_info=True)
        return None


class RunPublisher:
    """Publishes one run's chunks to its queue (``app.runs.submit.Publisher``)."""

    def __init__(self, sender: Any, chunk_size: int, *, run_name: str, queue: str) -> None:
        self.sender = sender
        self.chunk_size = chunk_size
        self.run_name = run_name
        self.queue = queue
        self.chunks = 0  #: messages published so far: the next chunk's number is one more

    def start(self, now_s: float) -> None:
        """Before the first message: make sure the broker has an epoch, so a sweeper does not
        take these messages for ones the broker lost (raises PublishError)."""
        broker_epoch(self.sender, now_s)

    def __call__(self, run_id: int, decision_ids: Sequence[int]) -> int:
        sent = publish_chunks(self.sender, run_id, decision_ids, self.chunk_size,
                              run_name=self.run_name, queue=self.queue,
                              first_chunk=self.chunks + 1)
        self.chunks += sent
        return sent
