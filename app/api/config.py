"""What ``dreads serve`` runs with, fixed at start (``create_app(ServeConfig(...))``).

``serve_config(env, ...)`` builds it from ``Settings`` (``DREADS_*``) with flags on top (None:
not given): ``dreads serve`` passes its flags, ``create_app_from_env`` none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from app.api.middleware import MIB
from app.api.site_guard import LOOPBACK_HOSTS, host_patterns
from app.connect.factory import UpstreamConfig
from app.engine import ReadSettings
from app.errors import ConfigError
from app.images import ImagePolicy
from app.images.guard import FetchGuard
from app.runs.embedded import EmbeddedConfig
from app.runs.sweep import SweepPolicy

if TYPE_CHECKING:
    from app.config import Settings

__all__ = ["EXECUTORS", "ServeConfig", "serve_config", "serve_upstream"]

#: Who runs the runs submitted over HTTP: "auto" is local for SQLite, queue otherwise.
EXECUTORS = ("auto", "local", "queue")



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
    max_body_bytes: int = 8 * MIB  #: request bodies (decoded), except run uploads
    max_upload_bytes: int = 2048 * MIB  #: ``POST /v1/runs`` bodies (decoded)
    #: ``/v1/systemone`` requests answered at once; more get 529 with ``retry-after``.
    max_concurrent: int = 256
    chunk_size: int = 64  #: decisions per queue message (queue executor)
    sim_key: str | None = None  #: answer key of the in-process simulator (``upstream`` "sim")
    metrics_cache_s: float = 10.0  #: seconds one SQL snapshot of the per-run gauges serves
    metrics_max_runs: int = 20  #: the most recent runs (cancelled ones too) with per-run gauges
    #: how the local executor runs a run (leases, attempts, reads in flight, endpoints)
    local: EmbeddedConfig = field(default_factory=EmbeddedConfig)
    #: how a resume sweeps a run of the queue executor (and what counts as a lost message)
    sweep: SweepPolicy = field(default_factory=SweepPolicy)
    #: the queue executor's Celery configuration (``app.broker.config.celery_config``)
    celery: Mapping[str, Any] | None = None
    #: what a ``/v1/systemone`` request's images may be (``DREADS_IMAGE_*``): no local file
    #: unless ``DREADS_IMAGE_DIRS`` allows it, no address but public ones and those
    #: ``DREADS_FETCH_ALLOW`` opens
    images: ImagePolicy = field(default_factory=lambda: ImagePolicy(guard=FetchGuard()))
    #: threads that tokenize and decode images for requests (``DREADS_API_CPU_THREADS``)
    cpu_threads: int = 4
    #: image fetches in flight at once, over every request (``DREADS_API_IMAGE_FETCHES``)
    image_fetches: int = 32
    #: Host header patterns this server answers for (``app.api.site_guard``): loopback names,
    #: the bound address, ``DREADS_ALLOWED_HOSTS``
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    #: web origins besides the server's own that may send writes (``DREADS_ALLOWED_ORIGINS``)
    allowed_origins: tuple[str, ...] = ()
    #: the server ``DREADS_ANSWER_API_KEY`` is for (``DREADS_ANSWER_URL``): the default
    #: ``answer_url`` of runs answered by a decision endpoint (None: the upstream)
    answer_url: str | None = None
    #: decision endpoints ``POST /v1/runs`` may name as ``answer_url`` besides ``upstream``
    #: (``DREADS_ANSWER_URL``, ``DREADS_ANSWER_URLS``)
    answer_urls: tuple[str, ...] = ()

    @property
    def sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def serve_upstream(env: Settings, choice: UpstreamConfig, given: str | None,
                   model: str | None) -> str:
    """Where the API reads: ``--upstream``, else ``DREADS_UPSTREAM``; for an in-process engine
    the model it loads (``model_path``, else ``--model``, else ``DREADS_MODEL``)."""
    from app.connect.engines import is_in_process

    if is_in_process(choice.engine):
        return choice.model_path or model or env.model
    return given or env.upstream


def serve_config(env: Settings, *, upstream: str, settings: ReadSettings, database_url: str,
                 engine: UpstreamConfig, executor: str | None = None,
                 broker_url: str | None = None, record_run: str | None = None,
                 max_concurrent: int | None = None, chunk_size: int | None = None,
                 sim_key: str | None = None, host: str | None = None) -> ServeConfig:
    """The API's configuration: the flags given (None: not given) over ``env``.

    Raises:
        ConfigError: an executor other than auto, local or queue.
    """
    if env.api_executor not in EXECUTORS:
        raise ConfigError(f"DREADS_API_EXECUTOR must be auto, local or queue, not "
                          f"{env.api_executor!r}")
    from app.config import run_env
    from app.runs.settings import breaker_policy, endpoint_options, image_policy, sweep_policy

    frozen = run_env(env)
    chosen = executor if executor is not None and executor != "auto" else env.api_executor
    if chosen == "auto":
        chosen = "local" if database_url.startswith("sqlite") else "queue"
    endpoints = replace(endpoint_options(frozen), key_url=env.answer_url or upstream)
    #: a client's images, at submit and when this server's executor reads them again
    images = replace(image_policy(frozen), guard=FetchGuard.parse(env.fetch_allow))
    local = EmbeddedConfig(lease_s=env.lease_s, max_attempts=env.max_attempts,
                           max_in_flight=env.max_in_flight, engine=engine,
                           endpoints=endpoints, breaker=breaker_policy(frozen),
                           gpu_price_hour=env.gpu_price_hour, images=images)
    return ServeConfig(
        upstream=upstream, settings=settings, database_url=database_url, executor=chosen,
        broker_url=broker_url or env.broker_url, engine=engine, api_key=env.api_key,
        record_run=record_run or env.api_record_run,
        max_body_bytes=int(env.api_max_body_mb * MIB),
        max_upload_bytes=int(env.api_max_upload_mb * MIB),
        max_concurrent=max_concurrent or env.api_max_concurrent,
        chunk_size=chunk_size or env.chunk_size, sim_key=sim_key,
        metrics_cache_s=env.metrics_cache_s, metrics_max_runs=env.metrics_max_runs,
        local=local, sweep=sweep_policy(frozen, chunk_size=chunk_size),
        celery=_celery(env, broker_url) if chosen == "queue" else None,
        images=images, cpu_threads=env.api_cpu_threads, image_fetches=env.api_image_fetches,
        allowed_hosts=host_patterns([*bound_names(host or env.api_host),
                                     *listed(env.allowed_hosts)]),
        allowed_origins=listed(env.allowed_origins), answer_url=env.answer_url,
        answer_urls=tuple(u for u in (env.answer_url, *listed(env.answer_urls)) if u))


def listed(value: str | None) -> tuple[str, ...]:
    """A comma-separated setting's items (unset: none)."""
    return tuple(item.strip() for item in (value or "").split(",") if item.strip())


def bound_names(host: str) -> tuple[str, ...]:
    """The names a server bound to ``host`` is reached by: the address itself, or, bound to
    every interface (``0.0.0.0``, ``::``), this machine's name and addresses (a pod's probes
    and its neighbours use them)."""
    if host.strip() not in ("", "0.0.0.0", "::", "[::]"):
        return (host,)
    import socket

    names = {socket.gethostname()}
    try:
        names.add(socket.getfqdn())
        for info in socket.getaddrinfo(socket.gethostname(), None):
            names.add(str(info[4][0]))
    except OSError:
        pass
    return tuple(sorted(names))


def _celery(env: Settings, broker_url: str | None) -> dict[str, Any]:
    from app.broker.config import celery_config

    config = celery_config(env)
    if broker_url:
        config["broker_url"] = broker_url
    return config
