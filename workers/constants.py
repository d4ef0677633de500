"""Queue names, task names and Redis keys: the one place they are spelled."""

from __future__ import annotations

__all__ = ["QUEUE", "SWEEP_LOCK_ID", "SWEEP_LOCK_KEY", "TASK_RUN_CHUNK"]

#: The queue every chunk message goes to.
QUEUE = "dreads.reads"
#: ``reads.run_chunk(run_id, decision_ids)``: claim and run one chunk of decisions.
TASK_RUN_CHUNK = "reads.run_chunk"
#: PostgreSQL advisory lock id held while one sweeper sweeps (any 64-bit int unique to dreads).
SWEEP_LOCK_ID = 0x64726561_6473
#: Redis lock key used when the database has no advisory locks (SQLite).
SWEEP_LOCK_KEY = "dreads:sweeper:lock"
