"""Prompts encoded end to end in one row, without padding.

A right-padded encoder batch of prompts of 150 to 800 tokens spends a quarter of its work on
pads: every layer's projections, norms and experts run on them. Here the prompts of one call
are laid end to end in a single row ``[prompt 1 | prompt 2 | ...]``, each at positions
``0..n-1``; every layer but attention works token by token, so only attention needs to know
where a prompt ends: it runs causally over each prompt's own span, with the sliding window
applied when a prompt is longer than it. So each prompt's keys and values are what it gets
encoded alone. On a GPU that is one variable-length kernel call per layer over the row (flash
attention with grouped-query heads and the window; the memory-efficient kernel over expanded
heads where they are too wide for flash); on the CPU, an SDPA call per prompt.

The object is both the encoder's ``cache`` (``update`` keeps each layer's new keys and hands
them back unchanged) and its ``read_batch`` (``attend``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import torch
from torch.nn.attention import SDPBackend

from app.inprocess.kv import KVEntry, LayerKinds

__all__ = ["FUSED_BACKENDS", "VarlenPrefill", "one_call_attention_works"]

_FLASH_MAX_DIM = 256  #: the widest head the flash kernel takes
_HALF = (torch.bfloat16, torch.float16)  #: the dtypes the variable-length kernels take
_CAUSAL_FROM_TOP_LEFT = 1  #: the memory-efficient kernel's ``custom_mask_type`` for causal

#: the SDPA kernels a prefill's attention may use on a GPU. Not cuDNN's: it builds an execution
#: plan for every new sequence length, tens of milliseconds of CPU each, and a packed prefill
#: has a new length in nearly every prompt (on an H200 they made a field-shaped run's encoder
#: 5.4x slower)
FUSED_BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


class VarlenPrefill:
    """One encoder call over ``prompts`` packed in one row (see the module doc)."""

    is_compileable = False
    one_call = True  #: on a GPU, ``attend_varlen`` where it applies (False: benchmarks)

    def __init__(self, kinds: LayerKinds | None, lengths: Sequence[int]) -> None:
        """``kinds``: the model's layer kinds (None: for its attention alone)."""
        self.layer_kinds = kinds
        self.lengths = list(lengths)
        self.starts = [0, *accumulate(self.lengths)][:-1]  #: where each prompt starts
        self.longest = max(self.lengths)
        #: per layer: its (1, kv_heads, total, dim) keys and values, as the encoder made them
        self.layers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._masks: dict[int, torch.Tensor] = {}
        self._bounds: torch.Tensor | None = None  #: the kernels' cumulative lengths, on a GPU

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
        ``value`` (1, kv_heads, total, dim); returns (1, total, heads, dim). On a GPU one
        variable-length kernel call for the row (``attend_varlen``) in bf16 or float16 where a
        probe found the kernels working (``one_call_attention_works``), except for heads too
        wide for flash attention under a sliding window; else a call per prompt
        (``attend_each``)."""
        scale, window = module.scaling, getattr(module, "sliding_window", None)
        window = window if window and self.longest > window else None
        if (self.one_call and query.is_cuda and query.dtype in _HALF
                and (query.shape[-1] <= _FLASH_MAX_DIM or window is None)
                and one_call_attention_works(query.device, query.dtype, query.shape[1],
                                             key.shape[1], query.shape[-1], window)):
            return self.attend_varlen(scale, window, query, key, value)
        return self.attend_each(scale, window, query, key, value)

    def attend_each(self, scale: float, window: int | None, query: torch.Tensor,
                    key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """``attend`` with one SDPA call per prompt (the CPU's way)."""
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
                is_causal=mask is None, scale=scale, enable_gqa=gqa)
        return out.transpose(1, 2)

    def attend_varlen(self, scale: float, window: int | None, query: torch.Tensor,
                      key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """Every prompt's causal attention in one kernel call over the packed row, delimited by
        cumulative lengths (a GPU's variable-length kernels): flash attention for heads up to
        256 wide, grouped-query heads and a sliding ``window`` included (keys less than
        ``window`` tokens back); the memory-efficient kernel over expanded key heads for wider
        ones (no window). A GPU only."""
        q = query[0].transpose(0, 1)  # (total, heads, dim)
        k, v = key[0].transpose(0, 1), value[0].transpose(0, 1)
        longest = self.longest
        if self._bounds is None:  # (prompts + 1,): where each prompt starts, then the total
            self._bounds = torch.tensor([0, *accumulate(self.lengths)], dtype=torch.int32,
                                        device=q.device)
        bounds = self._bounds
        if q.shape[-1] <= _FLASH_MAX_DIM:
            return torch.ops.aten._flash_attention_forward(
                q, k, v, bounds, bounds, longest, longest, 0.0, True, False, scale=scale,
                window_size_left=window - 1 if window else -1,
                window_size_right=0 if window else -1)[0][None]
        repeat = q.shape[1] // k.shape[1]
        if repeat > 1:
            k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)
        return torch.ops.aten._efficient_attention_forward(
            q[None], k[None], v[None], None, bounds, bounds, longest, longest, 0.0,
            _CAUSAL_FROM_TOP_LEFT, False, scale=scale)[0]

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
        assert kinds is not None, "an attention-only prefill has no entries"
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


_PROBE_LENGTHS = (1, 37, 300, 130, 9, 257)  #: the probe's prompts (tokens)


@functools.cache
def one_call_attention_works(device: torch.device, dtype: torch.dtype, heads: int,
                             kv_heads: int, dim: int, window: int | None) -> bool:
    """Whether ``VarlenPrefill.attend_varlen`` gives on ``device`` what a call per prompt gives,
    for one head shape and window (probed once each, on random prompts of 1 to 300 tokens, a
    window shorter than the longest): against the same attention of the same inputs in
    float32, its largest error must stay within twice that of SDPA called per prompt in
    ``dtype``, plus 1e-3. A kernel that fails or differs leaves the call per prompt in use for
    that shape."""
    probe = VarlenPrefill(None, _PROBE_LENGTHS)
    generator = torch.Generator().manual_seed(0)
    total = sum(_PROBE_LENGTHS)
    q, k, v = (torch.randn((1, n, total, dim), generator=generator).to(device, dtype)
               for n in (heads, kv_heads, kv_heads))
    scale = dim ** -0.5
    window = min(window, max(_PROBE_LENGTHS) // 3) if window else None
    try:
        one_call = probe.attend_varlen(scale, window, q, k, v).float()
    except Exception:  # no such kernel for this device, dtype or torch: a call per prompt
        return False
    per_prompt = probe.attend_each(scale, window, q, k, v).float()
    exact = probe.attend_each(scale, window, q.float(), k.float(), v.float())
    return bool((one_call - exact).abs().max() <= 2 * (per_prompt - exact).abs().max() + 1e-3)
