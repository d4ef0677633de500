"""Prompts encoded end to end in one row, without padding.

A right-padded encoder batch of prompts of 150 to 800 tokens spends a quarter of its work on
pads: every layer's projections, norms and experts run on them. Here the prompts of one call
are laid end to end in a single row ``[prompt 1 | prompt 2 | ...]``, each at positions
``0..n-1``; every layer but attention works token by token, so only attention needs to know
where a prompt ends: it runs causally over each prompt's own span (SDPA's fused causal kernels:
flash with grouped-query heads, or the memory-efficient kernel over expanded heads where they
are too wide for flash), with the sliding window applied when a prompt is longer than it. So
each prompt's keys and values are what it gets encoded alone.

The object is both the encoder's ``cache`` (``update`` keeps each layer's new keys and hands
them back unchanged) and its ``read_batch`` (``attend``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import torch
from torch.nn.attention import SDPBackend

from app.upstream.transformers_engine.kv import KVEntry, LayerKinds

__all__ = ["FUSED_BACKENDS", "VarlenPrefill"]

_FLASH_MAX_DIM = 256  #: the widest head the flash kernel takes

#: the SDPA kernels a prefill's attention may use on a GPU. Not cuDNN's: it builds an execution
#: plan for every new sequence length, tens of milliseconds of CPU each, and a packed prefill
#: has a new length in nearly every prompt (on an H200 they made a field-shaped run's encoder
#: 5.4x slower)
FUSED_BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


class VarlenPrefill:
    """One encoder call over ``prompts`` packed in one row (see the module doc)."""

    is_compileable = False

    def __init__(self, kinds: LayerKinds, lengths: Sequence[int]) -> None:
        self.layer_kinds = kinds
        self.lengths = list(lengths)
        self.starts = [0, *accumulate(self.lengths)][:-1]  #: where each prompt starts
        #: per layer: its (1, kv_heads, total, dim) keys and values, as the encoder made them
        self.layers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._masks: dict[int, torch.Tensor] = {}

    def inputs(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(1, total) input ids and positions: each prompt from position 0."""
        ids = torch.tensor([t for p in prompts for t in p], dtype=torch.long)[None, :]
        positions = torch.cat([torch.arange(n) for n in self.lengths])[None, :]
        return ids, positions

    # -- the encoder's view ---------------------------------------------------------------------

    @torch.compiler.disable
    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int,
               **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Keep a layer's (1, kv_heads, total, dim) keys and values; return them as they are."""
        self.layers[layer_idx] = (key, value)
        return key, value

    @torch.compiler.disable
    def attend(self, module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
               ) -> torch.Tensor:
        """Causal attention within each prompt. ``query`` (1, heads, total, dim), ``key`` and
        ``value`` (1, kv_heads, total, dim); returns (1, total, heads, dim)."""
        window = getattr(module, "sliding_window", None)
        gqa = query.shape[1] != key.shape[1]
        if gqa and query.shape[-1] > _FLASH_MAX_DIM:
            # no fused kernel takes grouped heads this wide (SDPA would fall back to its float32
            # math path): expand the key heads once for the row, for the memory-efficient kernel
            repeat = query.shape[1] // key.shape[1]
            key, value = key.repeat_interleave(repeat, 1), value.repeat_interleave(repeat, 1)
            gqa = False
        out = torch.empty_like(query)
        for start, n in zip(self.starts, self.lengths, strict=True):
            span = slice(start, start + n)
            mask = self._window_mask(n, window, query.device) if window and n > window else None
            out[:, :, span] = torch.nn.functional.scaled_dot_product_attention(
                query[:, :, span], key[:, :, span], value[:, :, span], attn_mask=mask,
                is_causal=mask is None, scale=module.scaling, enable_gqa=gqa)
        return out.transpose(1, 2)

    def _window_mask(self, n: int, window: int, device: torch.device) -> torch.Tensor:
        """(n, n) bool: causal, and less than ``window`` tokens back."""
        if n not in self._masks:
            t = torch.arange(n, device=device)
            back = t[:, None] - t[None, :]
            self._masks[n] = (back >= 0) & (back < window)
        return self._masks[n]

    # -- the result -----------------------------------------------------------------------------

    def entries(self) -> list[KVEntry]:
        """One entry per prompt, its kinds' layers stacked into memory of its own (sliding kinds
        keep their last window - 1 tokens)."""
        kinds = self.layer_kinds
        missing = set(kinds.kind_of) - set(self.layers)
        assert not missing, f"the encoder did not run layers {sorted(missing)}"
        out = []
        for start, n in zip(self.starts, self.lengths, strict=True):
            entry = []
            for kind, ids in enumerate(kinds.layers):
                span = slice(start + n - kinds.kept(kind, n), start + n)
                entry.append((torch.stack([self.layers[i][0][0, :, span] for i in ids]),
                              torch.stack([self.layers[i][1][0, :, span] for i in ids])))
            out.append(KVEntry(n, tuple(entry)))
        return out
