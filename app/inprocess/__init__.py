"""The in-process DiffusionGemma engine (transformers + torch, the ``engine`` extra).

Importing this package imports torch: only ``app.connect.factory`` (engine "transformers"),
``dreads engine`` commands, the simulator's ``--model`` hook, tests marked ``engine`` and the
benchmark do, lazily.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from app.inprocess.engine import (
    ENGINE,
    TransformersUpstream,
    default_cache_bytes,
    prefill_budget,
)
from app.inprocess.model import ReadModel, load_model
from app.inprocess.tiny import build_tiny_model, make_tiny_dir

if TYPE_CHECKING:
    from app.connect.factory import UpstreamConfig

__all__ = [
    "ENGINE",
    "ReadModel",
    "TransformersUpstream",
    "build_tiny_model",
    "default_cache_bytes",
    "load_model",
    "make_tiny_dir",
    "make_transformers_upstream",
    "prefill_budget",
]


def make_transformers_upstream(config: UpstreamConfig) -> TransformersUpstream:
    """The engine ``config`` asks for: ``model_path`` (else ``model``) loaded on ``device``,
    with the checkpoint's own tokenizer (as vLLM serves it).

    Raises:
        ConfigError: the checkpoint or its tokenizer cannot be loaded (the message says why).
    """
    from app.tokenizer.hf import load_tokenizer

    path = config.model_path or config.model
    model = _shared_model(path, config.device, config.dtype, config.compile,  # fails first
                          config.gpu_memory)
    return TransformersUpstream(path, tokenizer=load_tokenizer(path), model=model,
                                device=config.device, dtype=config.dtype,
                                max_batch=config.max_batch,
                                prefill_token_budget=prefill_budget(config.max_batch),
                                canvas_length=config.canvas_length)


@functools.lru_cache(maxsize=2)
def _shared_model(path: str, device: str, dtype: str, compiled: bool,
                  memory_gib: float | None) -> ReadModel:
    """Weights are loaded once per process: a worker that makes an upstream per chunk (each
    with its own batcher and prompt cache) does not reload 50 GB each time."""
    return load_model(path, device=device, dtype=dtype, compiled=compiled,
                      memory_gib=memory_gib)
