"""A run's settings: what a new run reads with, which engine reads it, and where.

The CLI (``run``, ``submit``, ``resume``, ``serve``, ``decide``, ``check-upstream``), the API
and the workers build their configuration here, the same way: flags (``None``: not given) on
top of ``DREADS_*`` (read by the entry point, passed in as ``env``: a frozen ``RunEnv``) on
top of ``ReadSettings``' defaults; model and tokenizer set nowhere come from the server the run
reads from. Engines are looked up in ``app.connect.engines`` (no engine names are compared here).

Nothing heavy is imported at the top: the CLI imports this module to parse a command line.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.engine import STANDIN, ReadSettings
from app.errors import ConfigError, InputError, UpstreamUnavailable

if TYPE_CHECKING:
    from app.connect.factory import UpstreamConfig
    from app.images import ImagePolicy
    from app.runs.answer import EndpointOptions
    from app.runs.breaker import BreakerPolicy
    from app.runs.chunk import ChunkPolicy
    from app.runs.env import RunEnv
    from app.runs.sweep import SweepPolicy
    from app.upstream.base import WaitProgress

__all__ = [
    "DTYPES",
    "base_read_settings",
    "chunk_policy",
    "endpoint_options",
    "endpoint_read_settings",
    "engine_choice",
    "engine_config",
    "env_engine",
    "env_upstream",
    "image_policy",
    "run_upstream",
    "served_fields_missing",
    "served_identity_update",
    "sweep_policy",
    "upstream_url",
    "wait_served_settings",
]

DTYPES = ("bfloat16", "float16", "float32")  #: of an in-process engine


def base_read_settings(overrides: dict[str, Any], *, env: RunEnv, engine: str = "vllm",
                       upstream: str | None = None) -> ReadSettings:
    """The read settings of a new run: ``DREADS_*`` (model, tokenizer, canvas), then the given
    overrides.

    Model and tokenizer the user set neither by flag nor by ``DREADS_MODEL`` /
    ``DREADS_TOKENIZER`` come from the server at ``upstream``: its served model id, whose
    tokenizer builds the canvases (the stand-in tokenizer for the simulator; ``upstream`` "sim"
    needs no request). With an in-process engine the canvases are built with the checkpoint's
    own tokenizer (the model), unless ``--tokenizer`` was given.

    Raises:
        ConfigError: the server must be asked and cannot be reached.
    """
    from app.connect.engines import is_in_process

    base = ReadSettings(model=env.model, tokenizer=env.tokenizer, canvas_length=env.canvas)
    settings = replace(base, **overrides)
    if is_in_process(engine):
        if "tokenizer" not in overrides:
            settings = replace(settings, tokenizer=settings.model)
        return settings
    return _served_defaults(settings, overrides, env, upstream)


def endpoint_read_settings(overrides: dict[str, Any], *, upstream: str,
                           env: RunEnv) -> ReadSettings:
    """The settings of a new run answered by a decision endpoint: ``answer_url`` defaults to
    ``DREADS_ANSWER_URL``, else ``upstream`` (vLLM's own reader on the same pod); the model,
    when set neither by flag nor by ``DREADS_MODEL``, is the one the endpoint serves
    (``GET /v1/models``, with ``DREADS_ANSWER_API_KEY`` where it is that key's server); no
    canvas is built here, so the tokenizer is the stand-in unless given.

    Raises:
        ConfigError: the endpoint must be asked for its model and cannot be.
    """
    given = dict(overrides)
    given.setdefault("answer_url", env.answer_url or upstream)
    given.setdefault("tokenizer", STANDIN)
    settings = replace(ReadSettings(model=env.model, canvas_length=env.canvas), **given)
    if "model" in given or "model" in env.set or settings.answer_url == "sim":
        return settings
    from app.upstream.served import served_identity
    from app.upstream.urls import key_for

    served = served_identity(settings.answer_url, api_key=key_for(
        settings.answer_url, key=env.answer_api_key, key_url=answer_key_url(env)))
    return replace(settings, model=served.model_id)


def _missing_served(overrides: dict[str, Any], from_env: frozenset[str]) -> set[str]:
    return {name for name in ("model", "tokenizer")
            if name not in overrides and name not in from_env}


def served_fields_missing(overrides: dict[str, Any], env: RunEnv) -> bool:
    """Whether the model or the tokenizer must come from the server (set nowhere else)."""
    return bool(_missing_served(overrides, env.set))


def _served_defaults(settings: ReadSettings, overrides: dict[str, Any],
                     env: RunEnv, upstream: str | None) -> ReadSettings:
    missing = _missing_served(overrides, env.set)
    if not missing or upstream is None:
        return settings
    if upstream == "sim":
        return replace(settings, tokenizer=STANDIN) if "tokenizer" in missing else settings
    from app.upstream.served import served_identity

    served = served_identity(upstream, api_key=env.upstream_api_key)
    if "model" in missing:
        settings = replace(settings, model=served.model_id)
    if "tokenizer" in missing:
        settings = replace(settings, tokenizer=STANDIN if served.is_sim else settings.model)
    return settings


async def wait_served_settings(url: str, settings: ReadSettings, overrides: dict[str, Any],
                               choice: UpstreamConfig, timeout_s: float, *,
                               env: RunEnv,
                               progress: WaitProgress | None = None) -> ReadSettings:
    """Model and tokenizer set nowhere: wait (up to ``timeout_s``) for the model list at
    ``url``, then take the served ones; ``settings`` as they are otherwise. ``progress`` is
    told the seconds waited and why after each try that failed.

    Raises:
        UpstreamUnavailable: the server did not list its model in time.
    """
    import asyncio
    import time

    from app.connect.engines import is_in_process

    if is_in_process(choice.engine) or not served_fields_missing(overrides, env):
        return settings
    started = time.monotonic()
    while True:
        try:
            return base_read_settings(overrides, env=env, engine=choice.engine, upstream=url)
        except (ConfigError, UpstreamUnavailable) as exc:
            waited = time.monotonic() - started
            if waited >= timeout_s:
                raise UpstreamUnavailable(f"not ready after {timeout_s:g}s: {exc.message}"
                                          ) from exc
            if progress is not None:
                progress(waited, exc.message)
            await asyncio.sleep(min(1.0, timeout_s - waited))


def served_identity_update(env: RunEnv) -> dict[str, str]:
    """A worker's model and tokenizer where ``DREADS_MODEL`` / ``DREADS_TOKENIZER`` are unset:
    those of the server at ``DREADS_UPSTREAM`` (its served model; its tokenizer, the stand-in
    for the simulator); empty when both are set or the engine reads in this process. The
    worker keeps them in its settings (its pool children inherit them); the environment is
    not written.

    Raises:
        ConfigError: the server does not list its model (yet).
    """
    from app.connect.engines import is_in_process

    missing = {"model", "tokenizer"} - env.set
    if not missing or is_in_process(env.engine):
        return {}
    from app.upstream.served import served_identity

    served = served_identity(env.upstream, api_key=env.upstream_api_key)
    model = served.model_id if "model" in missing else env.model
    update = {"model": model}
    if "tokenizer" in missing:
        update["tokenizer"] = STANDIN if served.is_sim else model
    return update


def engine_config(base: UpstreamConfig, *, engine: str | None, device: str | None,
                  dtype: str | None) -> UpstreamConfig:
    """``base`` with the options the user gave; checks them.

    Raises:
        ConfigError: an unknown engine or dtype, the message says what to pass.
    """
    from app.connect.engines import engine_spec

    chosen = replace(base, engine=engine or base.engine, device=device or base.device,
                     dtype=dtype or base.dtype)
    engine_spec(chosen.engine)
    if chosen.dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {chosen.dtype!r}: pass one of {', '.join(DTYPES)}")
    return chosen


def engine_choice(recorded: str | None, *, engine: str | None, device: str | None,
                  dtype: str | None, env: RunEnv) -> UpstreamConfig:
    """The engine a command reads with: the options given, else the run's ``recorded`` engine
    (an existing run), else ``DREADS_ENGINE``; device and dtype from the options or
    ``DREADS_DEVICE`` / ``DREADS_DTYPE``."""
    from app.connect.engines import ENGINES

    known = {str(kind) for kind in ENGINES}
    base = env_engine(env, engine=recorded if recorded in known else None)
    return engine_config(base, engine=engine, device=device, dtype=dtype)


def env_engine(env: RunEnv, *, engine: str | None = None) -> UpstreamConfig:
    """``engine`` (default ``DREADS_ENGINE``) as ``DREADS_DEVICE``, ``DREADS_DTYPE``,
    ``DREADS_ENGINE_COMPILE``, ``DREADS_ENGINE_GPU_MEMORY`` and ``DREADS_ENGINE_MAX_BATCH`` set
    it up, with this process's
    read limits (reads in flight, timeout, retries), the server's key
    (``DREADS_UPSTREAM_API_KEY``) and its declared batch invariance
    (``DREADS_UPSTREAM_BATCH_INVARIANT``)."""
    from app.connect.factory import UpstreamConfig

    return UpstreamConfig(engine=engine or env.engine, device=env.device, dtype=env.dtype,
                          compile=env.engine_compile, gpu_memory=env.engine_gpu_memory,
                          max_batch=env.engine_max_batch,
                          max_in_flight=env.max_in_flight,
                          timeout_s=env.read_timeout_s, retries=env.read_retries,
                          api_key=env.upstream_api_key,
                          batch_invariant=env.upstream_batch_invariant)


def upstream_url(given: str | None, recorded: str | None, env: RunEnv) -> str:
    """The server to read from: ``--upstream``, else ``DREADS_UPSTREAM`` when it is set (the
    server may have moved since the run started: a restarted pod has a new address), else the
    run's ``recorded`` upstream (an existing run), else the default."""
    if given:
        return given
    if "upstream" in env.set or recorded is None:
        return env_upstream(env)
    return recorded


def env_upstream(env: RunEnv) -> str:
    """``DREADS_UPSTREAM`` (or its default), refused when it cannot be a server's address.

    Raises:
        InputError: no ``http://``, another scheme, or no host (``app.upstream.urls``).
    """
    from app.upstream.urls import url_problem

    problem = url_problem(env.upstream, name="DREADS_UPSTREAM")
    if problem is not None:
        raise InputError(problem)
    return env.upstream


def run_upstream(given: str | None, recorded: str | None, choice: UpstreamConfig,
                 settings: ReadSettings, env: RunEnv) -> str:
    """What a run records as its upstream: the URL (``upstream_url``) for an engine that reads
    from a server; the model read in this process for an in-process engine (no URL).

    Raises:
        InputError: ``--upstream`` given together with an in-process engine.
    """
    from app.connect.engines import is_in_process

    if not is_in_process(choice.engine):
        return upstream_url(given, recorded, env)
    if given:
        raise InputError(f"--upstream {given} is for an engine that reads from a server; with "
                         f"--engine {choice.engine} the model (--model DIR or hub id) is read in "
                         "this process: drop --upstream")
    return choice.model_path or settings.model


def chunk_policy(env: RunEnv, *, recover_wait_s: float = 0.0,
                 max_in_flight: int | None = None) -> ChunkPolicy:
    """How this process runs chunks: ``DREADS_LEASE_S``, ``DREADS_MAX_IN_FLIGHT`` (or
    ``max_in_flight``), ``DREADS_MAX_ATTEMPTS``, ``DREADS_BREAKER_*``."""
    from app.runs.chunk import ChunkPolicy

    return ChunkPolicy(lease_s=env.lease_s, max_in_flight=max_in_flight or env.max_in_flight,
                       max_attempts=env.max_attempts, recover_wait_s=recover_wait_s,
                       breaker=breaker_policy(env))


def breaker_policy(env: RunEnv) -> BreakerPolicy:
    """When a run pauses: ``DREADS_BREAKER_WINDOW``, ``DREADS_BREAKER_THRESHOLD``; when it
    closes by itself: ``DREADS_BREAKER_PROBE_S``, ``DREADS_BREAKER_GIVE_UP_S``."""
    from app.runs.breaker import BreakerPolicy

    return BreakerPolicy(window=env.breaker_window, threshold=env.breaker_threshold,
                         probe_s=env.breaker_probe_s, give_up_s=env.breaker_give_up_s)


def sweep_policy(env: RunEnv, *, chunk_size: int | None = None) -> SweepPolicy:
    """How this process sweeps: ``DREADS_MAX_ATTEMPTS``, ``DREADS_REQUEUE_AFTER_S``,
    ``DREADS_CHUNK_SIZE`` (or ``chunk_size``)."""
    from app.runs.sweep import SweepPolicy

    return SweepPolicy(max_attempts=env.max_attempts, requeue_after_s=env.requeue_after_s,
                       chunk_size=chunk_size or env.chunk_size)


def endpoint_options(env: RunEnv) -> EndpointOptions:
    """How this process asks decision endpoints: ``DREADS_ANSWER_TIMEOUT_S``,
    ``DREADS_ANSWER_GIVE_UP_S``, ``DREADS_ANSWER_API_KEY``."""
    from app.runs.answer import EndpointOptions

    return EndpointOptions(timeout_s=env.answer_timeout_s, give_up_s=env.answer_give_up_s,
                           api_key=env.answer_api_key, key_url=answer_key_url(env),
                           images=image_policy(env))


def answer_key_url(env: RunEnv) -> str:
    """The server ``DREADS_ANSWER_API_KEY`` is for: ``DREADS_ANSWER_URL``, else the upstream
    (vLLM's own reader on the same pod)."""
    return env.answer_url or env.upstream


def image_policy(env: RunEnv) -> ImagePolicy:
    """What this process may fetch as images: ``DREADS_IMAGE_DIRS`` and the
    ``DREADS_IMAGE_*`` limits (any address: ``dreads serve`` adds its guard)."""
    from app.images import ImagePolicy, parse_image_dirs

    return ImagePolicy(allowed_dirs=parse_image_dirs(env.image_dirs),
                       max_bytes=env.image_max_bytes, timeout_s=env.image_timeout,
                       max_pixels=env.image_max_pixels, max_count=env.image_max_count,
                       max_total_bytes=env.image_max_total_bytes)
