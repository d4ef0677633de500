"""Settings from flags and ``DREADS_*`` environment variables.

Read only at entry points (the CLI commands, the API's ``serve_config``, the worker's main
process) through ``get_settings()`` or, with flags on top, ``settings_with(**flags)``, and
passed down as small frozen values. The run-configuration policy built on them is
``app.runs.settings``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.engine import DEFAULT_CANVAS, DEFAULT_MODEL, DEFAULT_UPSTREAM, STANDIN
from app.runs.env import RunEnv
from app.store.urls import DEFAULT_DATABASE_URL

__all__ = ["Settings", "get_settings", "run_env", "settings_with", "to_environ"]


def _blank_is_unset(value: Any) -> Any:
    """An empty variable is no price (compose passes ``${GPU_PRICE_HOUR:-}`` as "")."""
    return None if isinstance(value, str) and not value.strip() else value


#: A price in dollars: unset (or empty) for none.
Price = Annotated[Annotated[float, Field(ge=0.0)] | None, BeforeValidator(_blank_is_unset)]


class Settings(BaseSettings):
    """Process-wide settings. Every field is ``DREADS_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="DREADS_", env_file=None, extra="ignore")

    #: SQLAlchemy URL (or a SQLite file path). SQLite for the embedded mode, PostgreSQL
    #: (psycopg 3) distributed.
    database_url: str = DEFAULT_DATABASE_URL
    #: Celery broker (Redis).
    broker_url: str = "redis://127.0.0.1:6379/0"
    #: Upstream base URL of vLLM, or "sim".
    upstream: str = DEFAULT_UPSTREAM
    #: Served model name sent in requests.
    model: str = DEFAULT_MODEL
    #: Tokenizer: a hub id, a local path, or "standin" (the simulator's).
    tokenizer: str = STANDIN
    #: Served canvas length (vLLM --diffusion-config canvas_length).
    canvas: int = DEFAULT_CANVAS
    #: Bearer key of the upstream (vLLM's --api-key); sent on every request, never stored.
    upstream_api_key: SecretStr | None = None
    #: Whether the upstream was started batch-invariant (vLLM's ``VLLM_BATCH_INVARIANT=1``),
    #: as the operator declares it; recorded in a run's fingerprint when the server does not
    #: say (unset: not known).
    upstream_batch_invariant: bool | None = None
    #: Bearer key of a decision endpoint that answers runs (``--answer-by systemone|decisions``):
    #: sent on every request to it, never stored with the run or in the database.
    answer_api_key: SecretStr | None = None
    #: A decision endpoint's request timeout, and how long its transient failures (refused
    #: connections, 5xx, 429/503/529 with their retry-after) are retried before the attempt
    #: counts as failed.
    answer_timeout_s: float = 120.0
    answer_give_up_s: float = 300.0
    #: ``dreads worker --answers``: consume the queue of runs answered by a decision endpoint
    #: (``dreads.answers``) instead of the queue of a local model server's model, and wait for
    #: no model server.
    worker_answers: bool = False
    #: Token prices (unset: no dollar figure, tokens only), for ``--dry-run``'s estimate and
    #: recorded with a run that ``submit``/``run`` creates. A decision endpoint's, or any
    #: server's that bills by token: dollars per million input (prompt) and output tokens.
    #: Not run settings: a price never changes a run's settings hash.
    price_input_per_mtok: Price = None
    price_output_per_mtok: Price = None
    #: A GPU pod's price per hour in dollars: a worker's (and ``dreads run``'s) time is
    #: recorded at it, shared among the runs it serves by their reads; and ``--dry-run``'s
    #: estimate with ``--reads-per-second`` (a read rate measured on that GPU).
    gpu_price_hour: Price = None
    #: Directories ``file://`` images of job lines may be read from, separated by ``:`` (as
    #: ``PATH``); unset: none (a job file cannot make dreads read a local file).
    image_dirs: str | None = None
    #: ``--upstream sim`` (the in-process simulator) and ``dreads sim``: on a joint read (several
    #: questions on one canvas) the answers separate worse and lean to "no" (``SimOptions``),
    #: so joint reads rank and recall worse (0 to 1; 0: no effect). A test knob, never a run
    #: setting.
    sim_joint_interference: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    #: The largest image a decision may carry, in bytes (20 MiB).
    image_max_bytes: Annotated[int, Field(ge=1)] = 20 * 1024 * 1024
    #: Seconds one image's fetch (an http(s) URL) may take.
    image_timeout: Annotated[float, Field(gt=0)] = 30.0
    #: Pool processes of this worker (set by the worker itself): an answers worker splits each
    #: run's endpoint budget among them.
    worker_processes: int = 1
    #: Reads in flight per worker process.
    max_in_flight: int = 256
    #: Per-read HTTP timeout in seconds.
    read_timeout_s: float = 60.0
    #: Transient-error retries per read (in-process, jittered backoff).
    read_retries: int = 4
    #: Decisions per queue message. A chunk runs until its slowest decision ends, so keep
    #: worker processes x chunk size at several times the server's batch (--max-num-seqs).
    chunk_size: int = 64
    #: Lease length of a claimed decision, in seconds; renewed every third of it while the
    #: decision runs, so a dead worker's decisions are taken over within lease + sweep period.
    lease_s: float = 15.0
    #: Attempts after which a decision stops as failed/poison.
    max_attempts: int = 5
    #: The breaker: a run pauses when at least this share of its last ``breaker_window``
    #: attempts failed with one upstream kind (server_error, upstream_unreachable, timeout,
    #: throttled). Either 0 turns it off.
    breaker_window: Annotated[int, Field(ge=0)] = 50
    breaker_threshold: Annotated[float, Field(ge=0, le=1)] = 0.9
    #: Sweeper period in seconds.
    sweep_interval_s: float = 3.0
    #: A queued decision stamped this long ago without a claim is re-published once its queue
    #: is drained (a message lost other than by a broker losing its data, which is noticed at
    #: the next sweep).
    requeue_after_s: float = 60.0
    #: Celery visibility timeout (seconds); must exceed the task time limit.
    visibility_timeout_s: int = 3600
    #: Hard task time limit (seconds).
    task_time_limit_s: int = 1500
    #: Flower basic auth "user:password".
    flower_basic_auth: str | None = None
    #: Engine for reads, by name in the registry ``app.connect.engines``: "vllm" (HTTP, also
    #: the simulator) or "transformers" (in-process).
    engine: str = "vllm"
    #: Device for the in-process engine.
    device: str = "cpu"
    #: Dtype for the in-process engine.
    dtype: str = "bfloat16"
    #: In-process engine: compile the encoder's layers with ``torch.compile`` (faster prefills
    #: on a GPU, about 3.5 minutes of compiling when a worker starts).
    engine_compile: bool = False
    #: In-process engine: a memory limit on the GPU, in GiB (weights that do not fit are
    #: refused at load; the prompt cache and step arena are sized under it). Unset: the card's.
    engine_gpu_memory: float | None = None
    #: In-process engine: reads batched into one forward at most (the prefill token budget is
    #: 512 a read below the default 64); lower it where the card's memory is small.
    engine_max_batch: Annotated[int, Field(ge=1)] = 64
    #: ``dreads serve``: bearer key every /v1 route requires (unset: no authentication).
    api_key: str | None = None
    #: ``dreads serve``: address and port.
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    #: ``dreads serve``: "auto" (local for SQLite, queue otherwise), "local" or "queue".
    api_executor: str = "auto"
    #: ``dreads serve``: record every /v1/systemone answer into this run.
    api_record_run: str | None = None
    #: ``dreads serve``: largest decoded request body, and run upload, in MiB.
    api_max_body_mb: float = 8.0
    api_max_upload_mb: float = 2048.0
    #: ``dreads serve``: /v1/systemone requests answered at once; more get 529.
    api_max_concurrent: int = 256
    #: Workers: port of the Prometheus exporter in the worker's main process (unset: none).
    metrics_port: int | None = None
    #: Workers: interface of that exporter (0.0.0.0 in a container).
    metrics_host: str = "127.0.0.1"
    #: ``dreads serve``: seconds one SQL snapshot of the per-run gauges serves scrapes.
    metrics_cache_s: float = 10.0
    #: ``dreads serve``: the most recent runs (cancelled ones too) that get per-run gauges.
    metrics_max_runs: int = 20


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def settings_with(**flags: Any) -> Settings:
    """``DREADS_*`` with the flags given on top (``None``: not given): how the CLI, the API and
    the workers build their settings from flags. A field given here counts as set
    (``model_fields_set``), exactly as one from the environment does."""
    given = {name: value for name, value in flags.items() if value is not None}
    return Settings(**given) if given else get_settings()


def run_env(settings: Settings | None = None) -> RunEnv:
    """What ``app.runs`` reads of ``settings`` (default: ``get_settings()``), frozen: keys
    unwrapped (empty: None), and which fields were given (``model_fields_set``)."""
    settings = settings or get_settings()
    values = {f.name: getattr(settings, f.name) for f in fields(RunEnv) if f.name != "set"}
    for name, value in values.items():
        if isinstance(value, SecretStr):
            values[name] = value.get_secret_value() or None
    return RunEnv(**values, set=frozenset(settings.model_fields_set))


def to_environ(flags: Mapping[str, Any], base: Mapping[str, str]) -> dict[str, str]:
    """``base`` (an environment) with the flags given (``None``: not given) as their
    ``DREADS_*`` variables: the environment of a child process (``dreads worker`` starting
    Celery) that builds the same ``Settings``; this process's own environment is not written."""
    env = dict(base)
    for name, value in flags.items():
        if value is None or value is False:
            continue
        if name not in Settings.model_fields:
            raise ValueError(f"{name!r} is not a setting")
        env[f"DREADS_{name.upper()}"] = "1" if value is True else str(value)
    return env
