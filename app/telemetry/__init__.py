"""Prometheus metrics: the workers' (``worker``), their HTTP exporter (``exporter``) and the
per-run gauges ``dreads serve`` reads from SQL at scrape time (``run_gauges``).

Labels stay low-cardinality: a run's name, a cell (gauges only), an outcome kind, a stop
reason; never a decision id.
"""

from __future__ import annotations

from app.telemetry.exporter import (
    MULTIPROC_ENV,
    exposition,
    prepare_multiprocess_dir,
    start_exporter,
)
from app.telemetry.run_gauges import RunMetrics
from app.telemetry.worker import (
    record_answers,
    record_attempt,
    record_lease_takeovers,
    record_read,
    record_sweep,
    set_upstream_ready,
    start_run,
)

__all__ = [
    "MULTIPROC_ENV",
    "RunMetrics",
    "exposition",
    "prepare_multiprocess_dir",
    "record_answers",
    "record_attempt",
    "record_lease_takeovers",
    "record_read",
    "record_sweep",
    "set_upstream_ready",
    "start_exporter",
    "start_run",
]
