"""Leaner forwards for two of DiffusionGemma's hot spots, installed on a loaded model.

* **RMSNorm.** transformers' ``DiffusionGemmaRMSNorm`` upcasts to float32 and runs about eight
  separate kernels (pow, mean, add, pow, mul, mul, casts); ``torch.nn.functional.rms_norm``
  computes the same ``x * (mean(x^2) + eps)^-1/2 * weight`` in one fused kernel (float32
  accumulation). In float32 the result is the same function; in bf16 the weight and output are
  rounded once instead of the input being upcast.
* **Experts.** transformers' grouped MoE (``grouped_mm``) weights each expert output in float32
  over the full hidden width, un-permutes that float32 tensor and sums it. ``grouped_experts``
  weights the (4x narrower) intermediate activations instead (the down projection is linear, so
  it is the same function), un-permutes in the model dtype and sums with float32 accumulation:
  about a third of the memory traffic around the two grouped GEMMs.

* **Rotary embeddings.** transformers' ``apply_rotary_pos_emb`` computes
  ``x * cos + rotate_half(x) * sin`` in six kernels (a negation, a concatenation, two products,
  a sum) over four full-size temporaries; ``rotary`` writes each half of the output with one
  product and one fused multiply-add (``addcmul_``): four kernels, half the memory traffic, the
  same arithmetic (in float32 the same roundings).
* **Expert offsets** come from a binary search over the sorted expert ids, not ``bincount``
  (whose output size is read back from the GPU): no host synchronisation inside a layer, so a
  decoder step can be captured in a CUDA graph.

Each is checked against transformers' own forward in float32 by the engine's tests.
"""

from __future__ import annotations

import importlib
import types
from dataclasses import dataclass
from typing import Any

import torch
from transformers.integrations.moe import (
    ALL_EXPERTS_FUNCTIONS,
    _grouped_linear,
    grouped_mm_experts_forward,
)

__all__ = ["GROUPED_EXPERTS", "Routing", "fuse_norms", "grouped_experts", "norm_eps", "rotary",
           "set_kernels"]

GROUPED_EXPERTS = "dreads_grouped"


def norm_eps(norm: Any) -> float:
    """A DiffusionGemma RMSNorm's epsilon: ``variance_epsilon`` from transformers 5.25 on,
    ``eps`` before."""
    return float(norm.variance_epsilon if hasattr(norm, "variance_epsilon") else norm.eps)


def _fused_norm(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    weight = self.weight.to(hidden_states.dtype) if self.with_scale else None
    return torch.nn.functional.rms_norm(hidden_states, (hidden_states.shape[-1],), weight,
                                        norm_eps(self))


def fuse_norms(model: torch.nn.Module, on: bool = True) -> int:
    """Give every DiffusionGemma RMSNorm of ``model`` the fused forward (``on``) or its own
    back; how many."""
    count = 0
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm") and hasattr(module, "with_scale"):
            if on:
                module.forward = types.MethodType(_fused_norm, module)
            else:
                module.__dict__.pop("forward", None)
            count += 1
    return count


def grouped_experts(self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts-interface signature: (tokens, hidden) -> (tokens, hidden)."""
    if (self.has_bias or not self.has_gate or self.has_post_expert_norm
            or self._is_expert_parallel):
        return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
    routed = Routing.of(top_k_index, self.num_experts)
    gate_up = _grouped_linear(hidden_states[routed.source], self.gate_up_proj, routed.offsets,
                              is_transposed=self.is_transposed)
    gated = routed.weighted(self._apply_gate(gate_up), top_k_weights)
    out = _grouped_linear(gated, self.down_proj, routed.offsets,
                          is_transposed=self.is_transposed)
    return routed.combine(out, hidden_states.dtype)


@dataclass(frozen=True)
class Routing:
    """The (token, expert) rows of a mixture-of-experts layer sorted by expert, as grouped
    products take them, and the way back to the tokens."""

    top_k: int
    expert_ids: torch.Tensor  #: each row's expert, sorted
    perm: torch.Tensor  #: row -> its index in the flattened (token, k) choices
    offsets: torch.Tensor  #: offsets[e]: the end of expert e's rows (int32)

    @classmethod
    def of(cls, top_k_index: torch.Tensor, num_experts: int) -> Routing:
        expert_ids, perm = torch.sort(top_k_index.reshape(-1))
        # offsets[e]: how many of the sorted ids are <= e (the end of expert e's rows)
        experts = torch.arange(num_experts, device=expert_ids.device, dtype=expert_ids.dtype)
        offsets = torch.searchsorted(expert_ids, experts, right=True).to(torch.int32)
        return cls(int(top_k_index.shape[1]), expert_ids, perm, offsets)

    @property
    def source(self) -> torch.Tensor:
        """Each row's token."""
        return self.perm // self.top_k

    def weighted(self, rows: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        """``rows`` times their routing weight (in float32, back in their dtype)."""
        weights = top_k_weights.reshape(-1)[self.perm]
        return (rows.float() * weights[:, None]).to(rows.dtype)

    def combine(self, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Each token's rows summed (in float32) back in token order: (tokens, hidden)."""
        back = torch.empty_like(self.perm)
        back[self.perm] = torch.arange(self.perm.numel(), device=self.perm.device)
        summed = rows[back].view(-1, self.top_k, rows.shape[-1]).sum(dim=1, dtype=torch.float32)
        return summed.to(dtype)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           unsqueeze_dim: int = 1) -> torch.Tensor:
    """``apply_rotary_pos_emb``'s function: ``x * cos + rotate_half(x) * sin``, where
    ``rotate_half(x) = [-x2, x1]`` for the halves ``x1``, ``x2`` of the last axis."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    if torch.compiler.is_compiling():  # inductor fuses the plain formula (``out=`` it cannot)
        return torch.cat((x1 * cos[..., :half] - x2 * sin[..., :half],
                          x2 * cos[..., half:] + x1 * sin[..., half:]), dim=-1)
    out = torch.empty_like(x)
    low, high = out[..., :half], out[..., half:]
    torch.mul(x1, cos[..., :half], out=low)
    low.addcmul_(x2, sin[..., :half], value=-1)
    torch.mul(x2, cos[..., half:], out=high)
    high.addcmul_(x1, sin[..., half:])
    return out


def _install_rotary(on: bool) -> None:
    """transformers' DiffusionGemma attention looks ``apply_rotary_pos_emb`` up in its module
    at each call: point it at ``rotary`` (on) or back at transformers' own."""
    global _TRANSFORMERS_ROTARY
    module: Any = importlib.import_module(
        "transformers.models.diffusion_gemma.modeling_diffusion_gemma")
    if _TRANSFORMERS_ROTARY is None:
        _TRANSFORMERS_ROTARY = module.apply_rotary_pos_emb
    module.apply_rotary_pos_emb = rotary if on else _TRANSFORMERS_ROTARY


_TRANSFORMERS_ROTARY: Any = None


def set_kernels(model: Any, on: bool) -> None:
    """Fused norms, ``grouped_experts`` and ``rotary`` on a loaded DiffusionGemma (``on``), or
    transformers' own forwards back (idempotent). A model on other experts (eager, say) keeps
    them. The rotary function is one per process (transformers' module holds it): the last
    call decides it for every DiffusionGemma model loaded."""
    if GROUPED_EXPERTS not in ALL_EXPERTS_FUNCTIONS._global_mapping:
        ALL_EXPERTS_FUNCTIONS.register(GROUPED_EXPERTS, grouped_experts)
    current = getattr(model.config, "_experts_implementation", None)
    if on and current == "grouped_mm":
        model.set_experts_implementation(GROUPED_EXPERTS)
    elif not on and current == GROUPED_EXPERTS:
        model.set_experts_implementation("grouped_mm")
    fuse_norms(model, on)
    _install_rotary(on)
