"""``UpstreamConfig`` (a frozen value built at entry points) and ``make_upstream``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.engine.types import DEFAULT_CANVAS, DEFAULT_MODEL, DEFAULT_UPSTREAM, SIM, STANDIN
from app.errors import ConfigError
from app.upstream.base import Upstream

__all__ = ["SIM", "UpstreamConfig", "make_http_upstream", "make_upstream"]

@dataclass(frozen=True)
class UpstreamConfig:
    """How to reach the model: a vLLM base URL (or ``"sim"``) or the in-process engine."""

    url: str = DEFAULT_UPSTREAM
    engine: str = "vllm"  #: an ``app.connect.engines.EngineKind``
    model: str = DEFAULT_MODEL
    canvas_length: int = DEFAULT_CANVAS
    max_in_flight: int = 256
    timeout_s: float = 60.0
    retries: int = 4
    backoff_s: float = 0.5
    model_path: str | None = None  #: transformers engine: checkpoint
    device: str = "cpu"  #: transformers engine
    dtype: str = "bfloat16"  #: transformers engine
    compile: bool = False  #: transformers engine: torch.compile the encoder layers
    gpu_memory: float | None = None  #: transformers engine: the process's memory limit, GiB
    max_batch: int = 64  #: transformers engine: reads in one forward at most
    #: the simulator's tokenizer with ``url == "sim"`` (the run's, so it reads the same ids)
    tokenizer: str = STANDIN
    #: bearer key of the server (vLLM's --api-key; ``DREADS_UPSTREAM_API_KEY``); None: none
    api_key: str | None = field(default=None, repr=False)
    #: whether the server was started batch-invariant, as the operator declares it
    #: (``DREADS_UPSTREAM_BATCH_INVARIANT``); None: not declared
    batch_invariant: bool | None = None


def make_upstream(config: UpstreamConfig) -> Upstream:
    """The upstream ``config`` names, built by its engine (``app.connect.engines``).

    Raises:
        ConfigError: an unknown engine, or what the engine refuses (a URL that is not
        http(s), a checkpoint that does not load).
    """
    from app.connect.engines import engine_spec

    return engine_spec(config.engine).make(config)


def make_http_upstream(config: UpstreamConfig) -> Upstream:
    """The ``vllm`` engine: vLLM (or ``dreads sim``) at ``config.url``; ``url == "sim"`` starts
    a simulator in a background thread (stopped by ``aclose()``)."""
    if config.url == SIM:
        return _sim_upstream(config)
    if not config.url.startswith(("http://", "https://")):
        raise ConfigError(
            f"upstream {config.url!r} is not a URL: pass http://host:port of vLLM (or of "
            "`dreads sim`), or 'sim' for an in-process simulator")
    return _vllm_upstream(config, config.url)


def _sim_upstream(config: UpstreamConfig) -> Upstream:
    from app.sim import SimOptions, start_sim_thread

    handle = start_sim_thread(SimOptions(model=config.model, canvas_length=config.canvas_length,
                                         tokenizer=config.tokenizer))
    return _vllm_upstream(config, handle.url, engine=SIM, on_close=handle.stop, api_key=None)


def _vllm_upstream(config: UpstreamConfig, url: str, **extra: Any) -> Upstream:
    from app.upstream.vllm import VllmUpstream

    extra.setdefault("api_key", config.api_key)
    return VllmUpstream(url, model=config.model, canvas_length=config.canvas_length,
                        max_in_flight=config.max_in_flight, timeout_s=config.timeout_s,
                        retries=config.retries, backoff_s=config.backoff_s,
                        batch_invariant=config.batch_invariant, **extra)
