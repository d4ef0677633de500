"""Serving metrics: the multiprocess directory of a worker, its HTTP exporter, and the text
exposition of a registry.

Celery's prefork children each write their values to ``PROMETHEUS_MULTIPROC_DIR``;
``prometheus_client`` picks multiprocess mode when that variable is set before it is first
imported, so ``dreads worker`` sets it up before it starts Celery (a fresh directory per start:
counters restart from zero with the worker, as Prometheus expects of a restarted process).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["MULTIPROC_ENV", "exposition", "mark_process_dead", "prepare_multiprocess_dir",
           "start_exporter"]

log = logging.getLogger("dreads.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare_multiprocess_dir(environ: dict[str, str] | None = None) -> tuple[Path, bool]:
    """An empty multiprocess directory, set in ``environ`` (``os.environ`` by default): the
    one ``PROMETHEUS_MULTIPROC_DIR`` names (its old ``*.db`` files removed), or a new temporary
    one. Returns it and whether it was created here (the caller removes it at exit)."""
    env = os.environ if environ is None else environ
    given = env.get(MULTIPROC_ENV)
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for old in path.glob("*.db"):
            old.unlink(missing_ok=True)
        return path, False
    path = Path(tempfile.mkdtemp(prefix="dreads-metrics-"))
    env[MULTIPROC_ENV] = str(path)
    return path, True


def remove_multiprocess_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _registry() -> Any:
    """The default registry, or one that adds up every process's files in multiprocess mode."""
    from prometheus_client import REGISTRY, CollectorRegistry, multiprocess

    if not os.environ.get(MULTIPROC_ENV):
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


def exposition(*extra: Any) -> bytes:
    """This process's metrics (all processes' in multiprocess mode) in the text format,
    followed by those of the ``extra`` registries."""
    from prometheus_client import generate_latest

    return b"".join(generate_latest(r) for r in (_registry(), *extra))


def start_exporter(host: str, port: int) -> Any:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread; None (logged) when the port
    cannot be bound, so a port clash never stops a worker."""
    from prometheus_client import start_http_server

    if not os.environ.get(MULTIPROC_ENV):
        log.warning("%s is not set: the metrics served on port %d are this process's only "
                    "(start workers with `dreads worker`, or set it, to add up a prefork "
                    "pool's children)", MULTIPROC_ENV, port)
    try:
        server, _thread = start_http_server(port, addr=host, registry=_registry())
    except OSError as exc:
        log.error("cannot serve metrics on %s:%d: %s", host, port, exc)
        return None
    log.info("metrics on http://%s:%d/metrics", host, port)
    return server


def mark_process_dead(pid: int) -> None:
    """A pool child exited: drop its live gauges (its counters keep counting in the sum)."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
