"""Who runs the runs submitted over HTTP.

- ``LocalExecutor``: this process runs them (the embedded executor of ``dreads run``) on the
  server's own upstream, one task per run; for a SQLite store on one host.
- ``QueueExecutor``: chunk messages go to the Celery workers through the broker (PostgreSQL +
  Redis); ``resume`` sweeps and re-publishes exactly as ``dreads resume`` does.

Both answer ``started`` / ``resumed`` with a JSON-able summary, and ``state`` with what a run's
status shows about its execution.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from app.config import get_settings
from app.embedded import EmbeddedConfig, execute_run, reclaim_dead_leases, release_own_leases
from app.engine import ReadSettings, settings_from_dict, settings_to_dict
from app.errors import DreadsError
from app.producer import Publisher, PublishOutcome, resume_run
from app.publish import make_publisher
from app.queues import queue_of_run
from app.store.db import session_scope
from app.store.runs import RunInfo, reset_failed
from app.store.types import SessionFactory
from app.sweeper import sweep_for
from app.upstream.base import Upstream
from app.upstream.tokenizer import load_tokenizer

__all__ = ["LocalExecutor", "QueueExecutor", "RunExecutor"]

log = logging.getLogger("dreads.api")


class RunExecutor(Protocol):
    name: str

    def publisher(self, run_name: str, settings: ReadSettings) -> Publisher | None:
        """What publishes a submission's decisions while it is written (None: not queued)."""
        ...

    async def started(self, run: RunInfo, outcome: PublishOutcome) -> dict[str, Any]:
        """New decisions of ``run`` were committed (and published as ``outcome`` says)."""
        ...

    async def resumed(self, run: RunInfo, *, retry_failed: bool) -> dict[str, Any]:
        """Continue ``run`` (failed ones first back to pending with ``retry_failed``)."""
        ...

    def state(self, run: RunInfo) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


class LocalExecutor:
    """Runs execute here, as background tasks on the shared upstream."""

    name = "local"

    def __init__(self, factory: SessionFactory, upstream: Upstream, upstream_url: str,
                 *, reclaim: bool) -> None:
        env = get_settings()
        self.factory = factory
        self.upstream = upstream
        self.upstream_url = upstream_url
        self.reclaim = reclaim  #: SQLite under this server's lock: earlier leases are dead
        self.config = EmbeddedConfig(lease_s=env.lease_s, max_attempts=env.max_attempts,
                                     max_in_flight=env.max_in_flight)
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.errors: dict[int, str] = {}
        self.again: set[int] = set()  #: decisions came in while the run's task was finishing

    def publisher(self, run_name: str, settings: ReadSettings) -> Publisher | None:
        return None  # this process runs the pending decisions itself

    async def started(self, run: RunInfo, outcome: PublishOutcome) -> dict[str, Any]:
        return {"executor": self.name, "running": self._start(run)}

    async def resumed(self, run: RunInfo, *, retry_failed: bool) -> dict[str, Any]:
        retried = reclaimed = 0
        if retry_failed:
            retried = await asyncio.to_thread(self._reset_failed, run.id)
        if self.reclaim and run.id not in self.tasks:
            reclaimed = await asyncio.to_thread(
                reclaim_dead_leases, self.factory, run.id, max_attempts=self.config.max_attempts)
        return {"executor": self.name, "retried_failed": retried,
                "reclaimed_leases": reclaimed, "running": self._start(run)}

    def _reset_failed(self, run_id: int) -> int:
        with session_scope(self.factory) as session:
            return reset_failed(session, run_id)

    def _start(self, run: RunInfo) -> bool:
        if run.id in self.tasks:
            self.again.add(run.id)
        else:
            self.errors.pop(run.id, None)
            task = asyncio.create_task(self._execute(run), name=f"dreads-run-{run.name}")
            self.tasks[run.id] = task
        return True

    async def _execute(self, run: RunInfo) -> None:
        settings = settings_from_dict(dict(run.settings))
        try:
            tokenizer = await asyncio.to_thread(load_tokenizer, settings.tokenizer)
            while True:
                self.again.discard(run.id)
                stats = await execute_run(self.factory, run, upstream_url=self.upstream_url,
                                          tokenizer=tokenizer, config=self.config,
                                          upstream=self.upstream)
                log.info("run %s: %d chunk(s), %d read(s), failures %s", run.name,
                         stats.chunks, stats.n_reads, stats.failed or "none")
                if run.id not in self.again:
                    return
        except DreadsError as exc:
            self.errors[run.id] = exc.message
            log.warning("run %s stopped: %s (POST /v1/runs/%s/resume continues it)",
                        run.name, exc.message, run.name)
        finally:
            self.tasks.pop(run.id, None)

    def state(self, run: RunInfo) -> dict[str, Any]:
        running = run.id in self.tasks
        return {"executor": self.name, "running": running,
                "error": None if running else self.errors.get(run.id)}

    async def aclose(self) -> None:
        runs = list(self.tasks)
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        for run_id in runs:
            released = await asyncio.to_thread(release_own_leases, self.factory, run_id)
            log.info("shutdown: %d decision(s) of run %d back to pending", released, run_id)


class QueueExecutor:
    """Runs execute on the Celery workers; this process only publishes."""

    name = "queue"

    def __init__(self, factory: SessionFactory, broker_url: str, chunk_size: int) -> None:
        from app.broker import make_client

        self.factory = factory
        self.chunk_size = chunk_size
        self.sender = make_client(get_settings(), broker_url=broker_url)

    def publisher(self, run_name: str, settings: ReadSettings) -> Publisher | None:
        return make_publisher(self.sender, self.chunk_size, run_name=run_name,
                              queue=queue_of_run(settings_to_dict(settings)))

    async def started(self, run: RunInfo, outcome: PublishOutcome) -> dict[str, Any]:
        return {"executor": self.name, "published": outcome.published,
                "messages": outcome.messages, "publish_error": outcome.error}

    async def resumed(self, run: RunInfo, *, retry_failed: bool) -> dict[str, Any]:
        sweep = sweep_for(self.factory, self.sender, run.id, self.chunk_size)
        report = await asyncio.to_thread(
            resume_run, self.factory, run, sweep=sweep, retry_failed=retry_failed,
            dry_run=False, requeue_after_s=get_settings().requeue_after_s)
        return {"executor": self.name, **report.as_dict()}

    def state(self, run: RunInfo) -> dict[str, Any]:
        return {"executor": self.name}

    async def aclose(self) -> None:
        await asyncio.to_thread(self.sender.close)
