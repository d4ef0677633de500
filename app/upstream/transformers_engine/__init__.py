"""The in-process DiffusionGemma engine (transformers + torch, the ``engine`` extra).

Importing this package imports torch: only ``app.upstream.factory`` (engine "transformers"),
``dreads engine`` commands, the simulator's ``--model`` hook, tests marked ``engine`` and the
benchmark do, lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.upstream.transformers_engine.engine import (
    ENGINE,
    TransformersUpstream,
    default_cache_bytes,
)
from app.upstream.transformers_engine.model import ReadModel, load_model
from app.upstream.transformers_engine.tiny import build_tiny_model, make_tiny_dir

if TYPE_CHECKING:
    from app.upstream.factory import UpstreamConfig

__all__ = [
    "ENGINE",
    "ReadModel",
    "TransformersUpstream",
    "build_tiny_model",
    "default_cache_bytes",
    "load_model",
    "make_tiny_dir",
    "make_transformers_upstream",
]


def make_transformers_upstream(config: UpstreamConfig) -> TransformersUpstream:
    """The engine ``config`` asks for: ``model_path`` (else ``model``) loaded on ``device``."""
    from app.upstream.tokenizer import load_tokenizer

    path = config.model_path or config.model
    return TransformersUpstream(path, tokenizer=load_tokenizer(path), device=config.device,
                                dtype=config.dtype, canvas_length=config.canvas_length)
