"""Who runs the runs submitted over HTTP.

- ``LocalExecutor``: this process runs them (the embedded executor of ``dreads run``) on the
  server's own upstream, one task per run; for a SQLite store on one host.
- ``QueueExecutor``: chunk messages go to the Celery workers through the broker (PostgreSQL +
  Redis); a resume sweeps and re-publishes exactly as ``dreads resume`` does.

Both answer ``started`` with a JSON-able summary, ``proceed`` as a resume's last step
(``app.runs.resume.resume_run``, called from a worker thread), and ``state`` / ``resumed``
with what a run's status and a resume show about its execution.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from app.broker.names import queue_of_run
from app.broker.publish import RunPublisher
from app.engine import ReadSettings, settings_from_dict, settings_to_dict
from app.errors import DreadsError
from app.runs.embedded import EmbeddedConfig, execute_run, reclaim_dead_leases, release_own_leases
from app.runs.reports import ResumeReport, SweepReport
from app.runs.submit import Publisher, PublishOutcome
from app.runs.sweep import RESUME_LOCK_WAIT_S, SweepPolicy, sweep_once
from app.store.runs import RunInfo
from app.store.types import SessionFactory
from app.tokenizer.hf import load_tokenizer
from app.upstream.base import Upstream

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

    def proceed(self, run: RunInfo, report: ResumeReport) -> SweepReport | None:
        """A resume's last step, once its checks passed (called from a worker thread)."""
        ...

    def resumed(self, run: RunInfo, report: ResumeReport) -> dict[str, Any]:
        """What a resume's answer shows of the execution."""
        ...

    def state(self, run: RunInfo) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


class LocalExecutor:
    """Runs execute here, as background tasks on the shared upstream."""

    name = "local"

    def __init__(self, factory: SessionFactory, upstream: Upstream, upstream_url: str,
                 config: EmbeddedConfig, *, reclaim: bool) -> None:
        self.factory = factory
        self.upstream = upstream
        self.upstream_url = upstream_url
        self.reclaim = reclaim  #: SQLite under this server's lock: earlier leases are dead
        self.config = config
        self.loop = asyncio.get_running_loop()
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.errors: dict[int, str] = {}
        self.again: set[int] = set()  #: decisions came in while the run's task was finishing

    def publisher(self, run_name: str, settings: ReadSettings) -> Publisher | None:
        return None  # this process runs the pending decisions itself

    async def started(self, run: RunInfo, outcome: PublishOutcome) -> dict[str, Any]:
        return {"executor": self.name, "running": self._start(run)}

    def proceed(self, run: RunInfo, report: ResumeReport) -> SweepReport:
        """Leases left by an earlier, dead server back to pending (the run is not running
        here), then the run's task (started on the server's loop)."""
        reclaimed = 0
        if self.reclaim and run.id not in self.tasks:
            reclaimed = reclaim_dead_leases(self.factory, run.id,
                                            max_attempts=self.config.max_attempts)
        asyncio.run_coroutine_threadsafe(self._start_soon(run), self.loop).result()
        return SweepReport(lost=reclaimed)

    def resumed(self, run: RunInfo, report: ResumeReport) -> dict[str, Any]:
        reclaimed = report.sweep.lost if report.sweep is not None else 0
        return {"executor": self.name, **report.as_dict(), "reclaimed_leases": reclaimed,
                "running": run.id in self.tasks}

    async def _start_soon(self, run: RunInfo) -> bool:
        return self._start(run)

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

    def __init__(self, factory: SessionFactory, celery: Any, chunk_size: int,
                 sweep: SweepPolicy) -> None:
        self.factory = factory
        self.chunk_size = chunk_size
        self.sweep = sweep
        self.sender = celery  #: a send-only Celery client (``app.broker.client``)

    def publisher(self, run_name: str, settings: ReadSettings) -> Publisher | None:
        return RunPublisher(self.sender, self.chunk_size, run_name=run_name,
                            queue=queue_of_run(settings_to_dict(settings)))

    async def started(self, run: RunInfo, outcome: PublishOutcome) -> dict[str, Any]:
        return {"executor": self.name, "published": outcome.published,
                "messages": outcome.messages, "publish_error": outcome.error}

    def proceed(self, run: RunInfo, report: ResumeReport) -> SweepReport:
        return sweep_once(self.factory, self.sender, self.sweep, run_id=run.id,
                          wait_lock_s=RESUME_LOCK_WAIT_S)

    def resumed(self, run: RunInfo, report: ResumeReport) -> dict[str, Any]:
        return {"executor": self.name, **report.as_dict()}

    def state(self, run: RunInfo) -> dict[str, Any]:
        return {"executor": self.name}

    async def aclose(self) -> None:
        await asyncio.to_thread(self.sender.close)
