"""The encoder's layers through ``torch.compile`` (regional compilation).

Outside its matrix products an encoder layer is a chain of small eager kernels: RMSNorms,
residual sums, casts, the GELU gate, the router's softmax and top-k, the experts' weighting.
Inductor fuses those chains. Each layer is compiled as one region with dynamic token counts
(one graph serves every call shape); attention and the cache write stay eager
(``torch.compiler.disable`` on the packed prefills' ``attend`` and ``update``), so the
regions hold only token-wise work.

All layers of a kind compile to the same graphs; they differ only in a constant (their index,
which dynamo guards on), so each layer is traced once, its graphs come from inductor's cache
after the first of its kind, and the recompile limit is raised to a few per layer. The first
prefill compiles: about 3.5 minutes at full size on an H200 (torch 2.11). Inductor keeps its
cache on disk (``TORCHINDUCTOR_CACHE_DIR``, by default under /tmp), so a worker restarted on
the same machine compiles faster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["compile_layers"]

_RECOMPILES_PER_LAYER = 4


def compile_layers(layers: Sequence[torch.nn.Module]) -> list[Any]:
    """``layers`` wrapped by ``torch.compile`` (the modules themselves are left as they are, so
    transformers' own forward keeps calling them eagerly)."""
    limit = _RECOMPILES_PER_LAYER * len(layers)
    config: Any = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, limit)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * limit)
    return [torch.compile(layer, dynamic=True) for layer in layers]
