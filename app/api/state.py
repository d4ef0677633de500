"""What the API's routes share, built once at start (``build_state``) and closed at exit."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from app.api.config import ServeConfig
from app.api.errors import OVERLOAD_RETRY_AFTER_S, api_error
from app.api.executor import LocalExecutor, QueueExecutor, RunExecutor
from app.api.recorder import Recorder
from app.connect.engines import is_in_process
from app.connect.factory import make_upstream
from app.engine import ReadSettings, ServerFingerprint, TextTokenizer, is_simulator
from app.errors import UpstreamError
from app.runs.embedded import embedded_lock, sqlite_store, start_upstream
from app.runs.probe import LoadedServer, Server, ServerAt, fingerprint_dict, reads_config
from app.store.db import disposing
from app.store.migrate import open_store
from app.store.types import SessionFactory
from app.store.urls import sqlite_path
from app.upstream.base import Upstream

__all__ = ["ApiState", "Limiter", "build_state"]

log = logging.getLogger("dreads.api")

_FINGERPRINT_TIMEOUT_S = 5.0


class Limiter:
    """At most ``limit`` requests answered at once; the next one gets 529 and ``retry-after``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    @contextmanager
    def slot(self) -> Any:
        if self.active >= self.limit:
            raise api_error(529, "overloaded_error",
                            f"this server is answering {self.active} requests, its limit "
                            "(DREADS_API_MAX_CONCURRENT); retry after a moment",
                            retry_after=OVERLOAD_RETRY_AFTER_S)
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1


@dataclass
class ApiState:
    config: ServeConfig
    settings: ReadSettings
    factory: SessionFactory
    upstream: Upstream
    upstream_url: str  #: where reads go (the in-process simulator's URL for "sim")
    tokenizer: TextTokenizer
    executor: RunExecutor
    recorder: Recorder
    limiter: Limiter
    started: date
    _fingerprint: ServerFingerprint | None = None
    _asking: asyncio.Task[ServerFingerprint | None] | None = None
    #: threads that tokenize and decode images for requests, off the event loop
    pool: Executor | None = None
    #: image fetches in flight at once over every request (``DREADS_API_IMAGE_FETCHES``)
    fetches: asyncio.Semaphore | None = None

    @property
    def model(self) -> str:
        return self.settings.model

    async def fingerprint(self) -> ServerFingerprint | None:
        """The upstream's fingerprint, asked once it answers (None while it does not)."""
        if self._fingerprint is None:
            try:
                self._fingerprint = await asyncio.wait_for(self.upstream.fingerprint(),
                                                           _FINGERPRINT_TIMEOUT_S)
            except (UpstreamError, TimeoutError) as exc:
                log.info("upstream fingerprint not available yet: %s", exc)
                return None
            self.recorder.fingerprint = fingerprint_dict(self._fingerprint)
        return self._fingerprint

    def server(self) -> Server:
        """This server's upstream as a resume checks it: reached at its URL as ``dreads
        resume`` reaches it (the same checks, the same words), or, for an in-process engine,
        the model loaded here."""
        if is_in_process(self.config.engine.engine):
            return LoadedServer(self.upstream_url, self.upstream, asyncio.get_running_loop(),
                                self.model)
        return ServerAt(self.upstream_url, self.config.engine)

    def simulator(self, fingerprint: ServerFingerprint | None) -> bool:
        """Whether this server's answers come from the simulator (``is_simulator``: the
        upstream "sim", or a ``dreads sim`` at the upstream URL once its fingerprint is
        known)."""
        return is_simulator(self.config.upstream, fingerprint)

    def known_fingerprint(self) -> ServerFingerprint | None:
        """The fingerprint if known now; else one question is sent in the background (for
        ``/health``, which must answer at once even when the upstream hangs)."""
        if self._fingerprint is None and (self._asking is None or self._asking.done()):
            self._asking = asyncio.create_task(self.fingerprint())
        return self._fingerprint


def _store(config: ServeConfig, stack: AsyncExitStack) -> SessionFactory:
    """The store: SQLite created or upgraded (as ``dreads run`` does) and, run by this process,
    locked against a second executor; any other database checked at head."""
    if not config.sqlite:
        return stack.enter_context(disposing(open_store(config.database_url)))
    db_path = sqlite_path(config.database_url) or Path("dreads.db")
    if config.executor == "local":
        stack.enter_context(embedded_lock(db_path))
    return stack.enter_context(sqlite_store(db_path))


def _upstream_url(config: ServeConfig, settings: ReadSettings, stack: AsyncExitStack) -> str:
    """Where reads go: the URL, or a simulator started here for "sim"."""
    if is_in_process(config.engine.engine):
        return config.upstream
    key = Path(config.sim_key) if config.sim_key else None
    url, sim = start_upstream(config.upstream, settings, key)
    if sim is not None:
        stack.callback(sim.stop)
        log.warning("answers come from the SIMULATOR at %s, not from a model", url)
    return str(url)


def _executor(config: ServeConfig, factory: SessionFactory, upstream: Upstream,
              url: str) -> RunExecutor:
    if config.executor == "queue":
        from app.broker.client import client_from_config

        assert config.celery is not None, "serve_config sets it for the queue executor"
        return QueueExecutor(factory, client_from_config(config.celery), config.chunk_size,
                             config.sweep)
    return LocalExecutor(factory, upstream, url, config.local, reclaim=config.sqlite)


async def build_state(config: ServeConfig, stack: AsyncExitStack) -> ApiState:
    """Open the store, start the upstream (and the simulator for "sim"), load the tokenizer."""
    from app.tokenizer.hf import load_tokenizer

    settings = config.settings
    factory = await asyncio.to_thread(_store, config, stack)
    url = _upstream_url(config, settings, stack)
    upstream = make_upstream(reads_config(config.engine, url, settings))
    stack.push_async_callback(upstream.aclose)
    tokenizer = await asyncio.to_thread(load_tokenizer, settings.tokenizer)
    executor = _executor(config, factory, upstream, url)
    stack.push_async_callback(executor.aclose)
    recorder = Recorder(factory, settings, config.upstream, config.engine.engine)
    pool = ThreadPoolExecutor(config.cpu_threads, thread_name_prefix="dreads-api-cpu")
    stack.callback(pool.shutdown, wait=False, cancel_futures=True)
    state = ApiState(config, settings, factory, upstream, url, tokenizer, executor, recorder,
                     Limiter(config.max_concurrent), datetime.now(UTC).date(), pool=pool,
                     fetches=asyncio.Semaphore(config.image_fetches))
    await state.fingerprint()
    return state
