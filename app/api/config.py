"""What ``dreads serve`` runs with, fixed at start (``create_app(ServeConfig(...))``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine import ReadSettings
from app.upstream.factory import UpstreamConfig

__all__ = ["ServeConfig"]

_MB = 1024 * 1024


@dataclass(frozen=True)
class ServeConfig:
    """The served model, the store, the run executor and the API's limits."""

    #: vLLM base URL, or "sim" to serve the simulator in this process (the model itself for the
    #: in-process transformers engine).
    upstream: str
    #: Read settings of ``/v1/systemone`` and the defaults of runs created over HTTP.
    settings: ReadSettings
    database_url: str
    #: "local": runs execute in this process (SQLite, one host); "queue": published to Celery
    #: workers through ``broker_url`` (PostgreSQL + Redis).
    executor: str = "local"
    broker_url: str = "redis://127.0.0.1:6379/0"
    engine: UpstreamConfig = field(default_factory=UpstreamConfig)
    #: Bearer key for every ``/v1`` route; None: no authentication.
    api_key: str | None = None
    #: Record every ``/v1/systemone`` answer into this run (a request may name its own).
    record_run: str | None = None
    max_body_bytes: int = 8 * _MB  #: request bodies (decoded), except run uploads
    max_upload_bytes: int = 2048 * _MB  #: ``POST /v1/runs`` bodies (decoded)
    #: ``/v1/systemone`` requests answered at once; more get 529 with ``retry-after``.
    max_concurrent: int = 256
    chunk_size: int = 64  #: decisions per queue message (queue executor)
    sim_key: str | None = None  #: answer key of the in-process simulator (``upstream`` "sim")
    metrics_cache_s: float = 10.0  #: seconds one SQL snapshot of the per-run gauges serves
    metrics_max_runs: int = 20  #: the most recent runs (not cancelled) with per-run gauges

    @property
    def sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")
