"""Thin Celery tasks: ids in, ``app.runs.chunk.run_chunk`` on the process's loop, counts out."""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future
from typing import Any

from celery import shared_task

from app.broker.names import TASK_RUN_CHUNK
from app.errors import StoreError
from app.runs.chunk import BeforeDecision, Delivery, HandOff, run_chunk
from app.store.queue import Claimed
from app.telemetry import set_upstream_ready
from workers.celery_app import process_state

__all__ = ["reads_run_chunk"]

log = logging.getLogger("dreads.worker")

# ``shared_task``: registered on the app that loads this module (the worker's), so importing
# it builds no Celery app.
@shared_task(name=TASK_RUN_CHUNK, bind=True, autoretry_for=(StoreError,), retry_backoff=2,
          retry_backoff_max=30, retry_jitter=True, max_retries=30)
def reads_run_chunk(self: Any, run_id: int, decision_ids: list[int]) -> dict[str, Any]:
    """Claim and run one chunk; a chunk already done or held elsewhere is a no-op. A database
    that is down at claim time retries the message with backoff (the rows stay in SQL)."""
    state = process_state()
    info = self.request.delivery_info or {}
    delivery = Delivery(state.owner, task_id=self.request.id,
                        redelivered=bool(info.get("redelivered")))
    handed_off = threading.Event()
    future = state.submit(run_chunk(
        state.session_factory, run_id, decision_ids, answerers=state.answerers,
        policy=state.policy, delivery=delivery,
        hand_off=HandOff(_hand_off_at(len(decision_ids)), handed_off.set),
        before_decision=_test_poison_hook()))
    future.add_done_callback(lambda _: handed_off.set())
    handed_off.wait()
    if not future.done():  # its slowest decisions go on beside the next chunk
        future.add_done_callback(_log_failure)
        return {"handed_off": True}
    result = future.result()  # a StoreError at the claim is retried (autoretry_for)
    if result.upstream_ready is not None:
        set_upstream_ready(state.settings.upstream, result.upstream_ready)
    if result.not_served:
        _stop_consuming(self, result.not_served)
    return result.as_dict()


#: The share of a chunk's decisions left running when its task returns and the next chunk
#: starts beside them.
HAND_OFF_SHARE = 0.5


def _hand_off_at(n: int) -> int:
    """Decisions of a chunk of ``n`` still running when the next chunk may start."""
    return int(n * HAND_OFF_SHARE)


def _log_failure(future: Future[Any]) -> None:
    """A handed-off chunk that failed after its task returned (its leases expire, and the
    sweeper re-publishes its decisions)."""
    if not future.cancelled() and future.exception() is not None:
        log.error("a chunk failed after its task returned: %s", future.exception())


def _stop_consuming(task: Any, why: str) -> None:
    """The upstream does not serve this queue's model (any more): this worker stops taking
    the queue's work (its decisions went back to pending, uncharged, for the other workers)."""
    queue = (task.request.delivery_info or {}).get("routing_key")
    settings = process_state().settings
    fix = ("DREADS_ANSWER_API_KEY" if settings.worker_answers
           else "DREADS_MODEL / DREADS_UPSTREAM")
    log.error("worker %s stops consuming %s: %s; fix %s and restart it",
              task.request.hostname, queue, why, fix)
    if queue and task.request.hostname:
        task.app.control.cancel_consumer(queue, destination=[task.request.hostname], reply=False)


def _test_poison_hook() -> BeforeDecision | None:
    """TEST ONLY: ``DREADS_TEST_POISON_KEY=<decision key>`` makes the process running that
    decision die at once (``os._exit``), to test the attempt cap on a decision that always
    kills its worker. Unset in production."""
    key = os.environ.get("DREADS_TEST_POISON_KEY")
    if not key:
        return None

    def die_on(claim: Claimed) -> None:
        if claim.key == key:
            os._exit(70)

    return die_on
