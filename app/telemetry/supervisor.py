"""What ``dreads worker``'s supervisor reports: its state, restarts and backoff, served on the
worker's metrics port together with its Celery pool's metrics.

The supervisor outlives its Celery worker (which may be dying over and over while the broker
is full or gone), so it serves ``/metrics`` itself: the pool's values from the multiprocess
directory (``PROMETHEUS_MULTIPROC_DIR``, written by the Celery processes) plus its own,
produced at scrape time from a ``SupervisorState`` (no metric objects of its own, so
``prometheus_client``'s multiprocess mode in this process changes nothing).

    dreads_worker_supervisor_state{state}     1 for the current state, 0 for the others:
                                               running, backoff, gave_up, stopped
    dreads_worker_supervisor_restarts_total    times the Celery worker was started again
    dreads_worker_supervisor_backoff_seconds   the wait before the next restart (0: running)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["STATES", "SupervisorState", "serve_worker_metrics"]

log = logging.getLogger("dreads.metrics")

STATES = ("running", "backoff", "gave_up", "stopped")


@dataclass
class SupervisorState:
    """The supervisor's state, read by the exporter's thread at each scrape."""

    state: str = "running"
    restarts: int = 0
    backoff_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def enter(self, state: str, *, backoff_s: float = 0.0) -> None:
        if state not in STATES:
            raise ValueError(f"unknown supervisor state {state!r}")
        with self._lock:
            self.state, self.backoff_s = state, backoff_s

    def restarted(self) -> None:
        with self._lock:
            self.restarts += 1

    def snapshot(self) -> tuple[str, int, float]:
        with self._lock:
            return self.state, self.restarts, self.backoff_s


class _SupervisorCollector:
    """The supervisor's metrics, made from its state at each scrape."""

    def __init__(self, state: SupervisorState) -> None:
        self._state = state

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        current, restarts, backoff_s = self._state.snapshot()
        states = GaugeMetricFamily(
            "dreads_worker_supervisor_state", "dreads worker's supervisor: 1 for its current "
            "state (running: the Celery worker is up; backoff: it died and is started again "
            "after a wait; gave_up: DREADS_WORKER_GIVE_UP_S passed; stopped).",
            labels=["state"])
        for name in STATES:
            states.add_metric([name], 1.0 if name == current else 0.0)
        yield states
        yield CounterMetricFamily(
            "dreads_worker_supervisor_restarts", "Times the supervisor started its Celery "
            "worker again after it died on its own.", value=restarts)
        yield GaugeMetricFamily(
            "dreads_worker_supervisor_backoff_seconds", "Seconds the supervisor waits before "
            "the next restart of its Celery worker (0 while it runs).", value=backoff_s)


def serve_worker_metrics(host: str, port: int, multiproc_dir: Path,
                         state: SupervisorState) -> Any:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread: the Celery processes' values
    (``multiproc_dir``) and the supervisor's. None (logged) when the port cannot be bound, so
    a port clash never stops a worker."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path=str(multiproc_dir))
    registry.register(_SupervisorCollector(state))
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.error("cannot serve metrics on %s:%d: %s", host, port, exc)
        return None
    log.info("metrics on http://%s:%d/metrics", host, port)
    return server
