"""The ``DREADS_*`` settings ``app.runs`` reads, as one frozen value: an entry point reads
``app.config.Settings`` once and passes ``app.config.run_env(settings)`` down; nothing in
``app.runs`` sees ``Settings`` itself. What each field means is said once, in
``app.config.Settings``; ``set`` names those given by a variable or a flag (not defaults).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunEnv"]


@dataclass(frozen=True)
class RunEnv:
    """``Settings``' fields that the run configuration (``app.runs.settings``) reads."""

    model: str
    tokenizer: str
    canvas: int
    upstream: str
    upstream_api_key: str | None  #: unwrapped; None when unset or empty
    upstream_batch_invariant: bool | None
    answer_api_key: str | None  #: unwrapped; None when unset or empty
    answer_timeout_s: float
    answer_give_up_s: float
    engine: str
    device: str
    dtype: str
    engine_compile: bool
    engine_gpu_memory: float | None
    engine_max_batch: int
    max_in_flight: int
    read_timeout_s: float
    read_retries: int
    chunk_size: int
    lease_s: float
    max_attempts: int
    breaker_window: int
    breaker_threshold: float
    requeue_after_s: float
    gpu_price_hour: float | None
    image_dirs: str | None
    image_max_bytes: int
    image_timeout: float
    sim_joint_interference: float = 0.0  #: the in-process simulator's (``--upstream sim``)
    set: frozenset[str] = frozenset()  #: the fields given by a variable or a flag
