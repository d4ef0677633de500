"""Queue names, task names and Redis keys: the one place they are spelled.

Shared by the publishing side (``app.broker.publish``, ``app.runs.sweep``, the API) and the
Celery worker (``workers/``), which imports them from here: ``app/`` never imports ``workers/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.engine import stored_plans_reads

__all__ = [
    "ANSWERS_QUEUE",
    "BROKER_EPOCH_KEY",
    "BROKER_RECOVERED_AT_KEY",
    "BROKER_RECOVERED_KEY",
    "BROKER_RECOVERY_PREFIX",
    "QUEUE",
    "QUEUE_PREFIX",
    "SWEEP_LOCK_ID",
    "TASK_RUN_CHUNK",
    "queue_for",
    "queue_of_run",
]

#: The default queue (only the task's default; chunk messages go to ``queue_for``).
QUEUE = "dreads.reads"
#: Chunk messages of a run go to the queue of the identity its reads need: the served model
#: and canvas. A worker consumes only the queue of what its own upstream serves.
QUEUE_PREFIX = "dreads.reads:"
#: Chunk messages of runs answered by a decision endpoint (an ``answer_by`` source that does
#: not plan reads: ``app.engine.sources``): consumed by ``dreads worker --answers`` (no local
#: model server needed), never by a pod's GPU workers, whose concurrency stays on reads.
ANSWERS_QUEUE = "dreads.answers"
#: ``reads.run_chunk(run_id, decision_ids)``: claim and run one chunk of decisions.
TASK_RUN_CHUNK = "reads.run_chunk"
#: PostgreSQL advisory lock id held while one sweeper sweeps (any 64-bit int unique to dreads;
#: ``app.store.dialects.advisory_lock``). SQLite, a single writer, needs no lock.
SWEEP_LOCK_ID = 0x64726561_6473
#: When the broker's current data began (database time, epoch seconds): set once, with NX, by
#: whoever finds it missing. A queued decision stamped before it was published to data that is
#: gone (a FLUSHDB, a Redis restarted without persistence).
BROKER_EPOCH_KEY = "dreads:broker:epoch"
#: The epoch whose lost messages a sweeper has re-published in full.
BROKER_RECOVERED_KEY = "dreads:broker:recovered"
#: When that recovery ended (database time, epoch seconds): the decisions it re-published
#: count as queued from then on (their rows are not rewritten).
BROKER_RECOVERED_AT_KEY = "dreads:broker:recovered_at"
#: ``{prefix}{epoch}:{run id}`` -> the last decision id of the run re-published for the epoch
#: that began at ``epoch``. It lives in the broker, so a new loss takes it along with the
#: messages it stands for, and a recovery cut short goes on from there.
BROKER_RECOVERY_PREFIX = "dreads:broker:recovery:"


def queue_for(model: str, canvas_length: int) -> str:
    """The queue of the runs reading ``model`` on a canvas of ``canvas_length``."""
    return f"{QUEUE_PREFIX}{model}@{canvas_length}"


def queue_of_run(settings: Mapping[str, Any]) -> str:
    """The queue of a run's chunks, from its stored settings: the answers queue for a run
    answered by a decision endpoint, else the queue of its model and canvas."""
    if not stored_plans_reads(settings):
        return ANSWERS_QUEUE
    return queue_for(str(settings.get("model")), int(settings.get("canvas_length") or 0))
