"""FP8 weights as compressed-tensors' ``float-quantized`` format stores them, and their products.

A quantized linear layer keeps its weight in ``float8_e4m3fn`` with one float32 scale per
output channel (``weight ~ weight_fp8 * weight_scale``); with dynamic per-token activations
(llm-compressor's ``FP8_DYNAMIC``), each row of its input is quantized on the fly the same way
(``x ~ x_fp8 * x_scale``, ``x_scale = max|row| / 448``). The product is then

    out[i, j] = x_scale[i] * weight_scale[j] * sum_k x_fp8[i, k] * weight_fp8[j, k]

computed in one of two ways (exact products, summed and scaled once):

* ``fp8``: FP8 matrix products (``torch.nn.functional.scaled_mm`` with row-wise scales; the
  grouped experts through ``scaled_grouped_mm``), on GPUs of compute capability 8.9 and up
  where a probe at load finds them working (``fp8_products``). There they run with fast
  accumulation (``Fp8Mode.fast``): the tensor cores sum a whole row of products in their own
  accumulator instead of adding partial sums into float32 registers every few steps, which
  makes torch's grouped FP8 product about 2.8 times faster on an H200 and adds a relative
  error of about 1e-3 (``bench/fp8_products.py``);
* ``dequant``: the FP8 values cast to the model's dtype (exact: every e4m3 value is a bf16
  value), a plain product, then the scales; anywhere, the CPU included.

On a GPU the per-row quantization of the inputs runs as one kernel (``fused_quantize_rows``:
``quantize_rows`` through ``torch.compile``, where a probe at load finds it giving the same
values); eagerly it is several kernels over float32 temporaries, which cost as much GPU time as
the FP8 products save.

The experts use the same arithmetic per (token, expert) row: ``fp8_experts`` is transformers'
experts interface over weights packed as ``(experts, out, in)`` FP8 tensors with
``(experts, out)`` scales.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS, _grouped_linear

from app.inprocess.kernels import Routing

__all__ = [
    "FP8",
    "FP8_EXPERTS",
    "FP8_MAX",
    "Fp8Linear",
    "Fp8Mode",
    "fp8_experts",
    "fp8_products",
    "fused_quantize_rows",
    "pack_expert_weights",
    "quantize_model",
    "quantize_rows",
    "register_fp8_experts",
    "set_fp8_mode",
    "use_fp8_products",
]

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)  #: 448
FP8_EXPERTS = "dreads_fp8"
_MIN_SCALE = 1e-12  #: a row of zeros keeps a finite scale
_MIN_CAPABILITY = (8, 9)


@dataclass(frozen=True)
class Fp8Mode:
    """How the FP8 products run: ``dense`` / ``experts`` True for FP8 matrix products, False
    for the dequantized product; ``fast``: the FP8 products with fast accumulation; ``fused``:
    inputs quantized by ``fused_quantize_rows``."""

    dense: bool = False
    experts: bool = False
    fast: bool = False
    fused: bool = False

    def describe(self, dtype: torch.dtype) -> str:
        """The fingerprint's words for it."""
        name = str(dtype).removeprefix("torch.")
        dense = "scaled_mm" if self.dense else f"dequantized to {name}"
        experts = "scaled_grouped_mm" if self.experts else f"dequantized to {name}"
        fast = ", fast accumulation" if self.fast and (self.dense or self.experts) else ""
        fused = ", inputs quantized by one compiled kernel" if self.fused else ""
        return f"dense {dense}, experts {experts}{fast}{fused}"


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, k) -> FP8 rows and their float32 scales (rows, 1): each row by its own max."""
    scale = (x.abs().amax(dim=-1, keepdim=True).float() / FP8_MAX).clamp(min=_MIN_SCALE)
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def _quantize_rows_exactly(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_rows``' values on ``x``'s device, written for compilation. Eager torch
    divides by a number as a product with its float32 reciprocal on a GPU (truly on the CPU),
    so the scale is computed that way there. Triton's float32 division of two tensors is
    approximate, so the inputs are divided in float64 and rounded once to float32, which gives
    the correctly rounded float32 quotient eager torch computes (float64 carries more than
    twice float32's digits)."""
    amax = x.abs().amax(dim=-1, keepdim=True).float()
    scale = (amax * (1 / FP8_MAX) if x.is_cuda else amax / FP8_MAX).clamp(min=_MIN_SCALE)
    q = (x.double() / scale.double()).float()
    return q.clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


@functools.cache
def _compiled_quantize() -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    # not fullgraph: past dynamo's recompile limit (a row count of 1, a strided input) a call
    # then runs the same arithmetic eagerly instead of failing
    return torch.compile(_quantize_rows_exactly, dynamic=False)


def fused_quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_rows`` as one kernel: inductor fuses the row maximum, the divisions, the
    clamps and the cast. The row count is dynamic and the width static, so each layer width
    compiles once (the model has five). Inside a region that is itself being compiled, the
    plain function: that region fuses it."""
    if torch.compiler.is_compiling():
        return quantize_rows(x)
    torch._dynamo.maybe_mark_dynamic(x, 0)
    return _compiled_quantize()(x)


def _quantizer(fused: bool) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    return fused_quantize_rows if fused else quantize_rows


def _dequant_mm(a: torch.Tensor, a_scale: torch.Tensor | None, weight: torch.Tensor,
                weight_scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(rows, k) x (out, k)^T with the scales applied after the product."""
    out = a.to(dtype) @ weight.to(dtype).t()
    scale = weight_scale.t() if a_scale is None else a_scale * weight_scale.t()
    return (out.float() * scale).to(dtype)


def _scaled_mm(a: torch.Tensor, a_scale: torch.Tensor, weight: torch.Tensor,
               weight_scale: torch.Tensor, dtype: torch.dtype, fast: bool = False) -> torch.Tensor:
    rows = F.ScalingType.RowWise
    return F.scaled_mm(a, weight.t(), a_scale, rows, weight_scale.t(), rows, output_dtype=dtype,
                       use_fast_accum=fast)


class Fp8Linear(torch.nn.Module):
    """A bias-free linear layer over an FP8 weight with per-channel scales; its input quantized
    per token when ``dynamic`` (else used as it is, with the weight dequantized)."""

    def __init__(self, in_features: int, out_features: int, *, dynamic: bool = True,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.dynamic = dynamic
        self.use_fp8 = False  #: FP8 matrix products (``set_fp8_mode``)
        self.fast_accum = False  #: the FP8 products with fast accumulation (``set_fp8_mode``)
        self.fused = False  #: inputs quantized by ``fused_quantize_rows`` (``set_fp8_mode``)
        self.weight = torch.nn.Parameter(
            torch.empty((out_features, in_features), dtype=FP8, device=device),
            requires_grad=False)
        self.weight_scale = torch.nn.Parameter(
            torch.empty((out_features, 1), dtype=torch.float32, device=device),
            requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if not self.dynamic:
            out = _dequant_mm(flat, None, self.weight, self.weight_scale, x.dtype)
        else:
            q, scale = _quantizer(self.fused)(flat)
            if self.use_fp8:
                out = _scaled_mm(q, scale, self.weight, self.weight_scale, x.dtype,
                                 self.fast_accum)
            else:
                out = _dequant_mm(q, scale, self.weight, self.weight_scale, x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"dynamic={self.dynamic}, fp8_products={self.use_fp8}, "
                f"fast_accumulation={self.fast_accum}, fused_quantize={self.fused}")


def pack_expert_weights(experts: Any, *, dynamic: bool) -> None:
    """Turn a DiffusionGemma experts module's ``gate_up_proj`` (E, 2I, H) and ``down_proj``
    (E, H, I) into FP8 parameters with (E, out) float32 scales, uninitialised on their device
    (the loader fills them)."""
    for name in ("gate_up_proj", "down_proj"):
        old = getattr(experts, name)
        setattr(experts, name, torch.nn.Parameter(
            torch.empty(old.shape, dtype=FP8, device=old.device), requires_grad=False))
        setattr(experts, f"{name}_scale", torch.nn.Parameter(
            torch.empty(old.shape[:2], dtype=torch.float32, device=old.device),
            requires_grad=False))
    experts.fp8_dynamic = dynamic
    experts.use_fp8 = experts.fp8_fast_accum = experts.fp8_fused = False


def _grouped(a: torch.Tensor, a_scale: torch.Tensor | None, weight: torch.Tensor,
             weight_scale: torch.Tensor, offsets: torch.Tensor, expert_ids: torch.Tensor,
             dtype: torch.dtype, fp8: bool, fast: bool = False) -> torch.Tensor:
    """Rows sorted by expert (``offsets``: each expert's end) times their expert's
    (out, in) FP8 weight, scaled by row and by the expert's output channel."""
    if fp8 and a_scale is not None:
        rows = F.ScalingType.RowWise
        grouped_mm: Any = F.__dict__["scaled_grouped_mm"]  # not in torch's stubs
        return grouped_mm(a, weight.transpose(-2, -1), a_scale.reshape(-1), rows, weight_scale,
                          rows, offs=offsets, output_dtype=dtype, use_fast_accum=fast)
    out = _grouped_linear(a.to(dtype), weight.to(dtype), offsets)
    scale = weight_scale[expert_ids]
    if a_scale is not None:
        scale = scale * a_scale
    return (out.float() * scale).to(dtype)


def fp8_experts(self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts-interface signature over FP8 experts (``pack_expert_weights``):
    the arithmetic of ``kernels.grouped_experts`` with each (token, expert) row's input
    quantized per row before each of the two products. A token's input to the first product is
    the same for each of its experts: it is quantized once, then gathered in FP8."""
    dtype = hidden_states.dtype
    routed = Routing.of(top_k_index, self.num_experts)

    def product(x: torch.Tensor, scale: torch.Tensor | None, name: str) -> torch.Tensor:
        return _grouped(x, scale, getattr(self, name), getattr(self, f"{name}_scale"),
                        routed.offsets, routed.expert_ids, dtype, self.use_fp8,
                        self.fp8_fast_accum)

    source = routed.source
    quantize = _quantizer(self.fp8_fused)
    if self.fp8_dynamic:
        q, scale = quantize(hidden_states)
        gate_up = product(q[source], scale[source], "gate_up_proj")
    else:
        gate_up = product(hidden_states[source], None, "gate_up_proj")
    gated = routed.weighted(self._apply_gate(gate_up), top_k_weights)
    if self.fp8_dynamic:
        out = product(*quantize(gated), "down_proj")
    else:
        out = product(gated, None, "down_proj")
    return routed.combine(out, dtype)


def register_fp8_experts() -> None:
    """Make ``FP8_EXPERTS`` a name ``set_experts_implementation`` accepts."""
    if FP8_EXPERTS not in ALL_EXPERTS_FUNCTIONS._global_mapping:
        ALL_EXPERTS_FUNCTIONS.register(FP8_EXPERTS, fp8_experts)


def set_fp8_mode(model: torch.nn.Module, mode: Fp8Mode) -> None:
    """Every FP8 layer of ``model`` runs its products as ``mode`` says."""
    module: Any
    for module in model.modules():
        if isinstance(module, Fp8Linear):
            module.use_fp8, module.fast_accum, module.fused = mode.dense, mode.fast, mode.fused
        elif hasattr(module, "fp8_dynamic"):
            module.use_fp8, module.fp8_fast_accum = mode.experts, mode.fast
            module.fp8_fused = mode.fused


def use_fp8_products(model: Any, device: torch.device) -> Fp8Mode:
    """Every FP8 layer of ``model`` (a transformers model on ``device``) set to the FP8
    products the device has for its dtype (``fp8_products``); which those are."""
    mode = fp8_products(device, model.dtype)
    set_fp8_mode(model, mode)
    return mode


def fp8_products(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> Fp8Mode:
    """Which FP8 products work on ``device`` for a model in ``dtype``: for a bf16 model (torch's
    row-wise FP8 products write bf16) on a GPU of compute capability 8.9 and up, each kind is
    tried once on a small product and kept only when it gives the dequantized product's answer
    (torch's grouped one needs compute capability 9.0 or 10.0), with fast accumulation;
    otherwise none. On any GPU the fused quantization is tried likewise (``fused``)."""
    if device.type != "cuda":
        return Fp8Mode()
    fused = _probe_fused(device, dtype)
    if dtype != torch.bfloat16 or torch.cuda.get_device_capability(device) < _MIN_CAPABILITY:
        return Fp8Mode(fused=fused)
    dense = _probe(device, grouped=False)
    return Fp8Mode(dense=dense, experts=dense and _probe(device, grouped=True), fast=dense,
                   fused=fused)


def _probe_fused(device: torch.device, dtype: torch.dtype) -> bool:
    """``fused_quantize_rows`` compiles on ``device`` and gives ``quantize_rows``' values (rows
    of every magnitude, two row counts: the compiled kernel serves both)."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    for rows in (48, 130):
        x = (torch.randn((rows, 96), generator=generator)
             * torch.logspace(-4, 4, rows)[:, None]).to(device, dtype)
        try:
            got, got_scale = fused_quantize_rows(x)
        except Exception:  # no working compiler here (triton, a C compiler): eager
            return False
        want, want_scale = quantize_rows(x)
        if not (torch.equal(got.view(torch.uint8), want.view(torch.uint8))
                and torch.equal(got_scale, want_scale)):
            return False
    return True


def _probe(device: torch.device, *, grouped: bool) -> bool:
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn((48, 64), generator=generator).to(device, torch.bfloat16)
    weight = torch.randn((3 if grouped else 1, 32, 64), generator=generator).to(device)
    q, q_scale = quantize_rows(a)
    w_q, w_scale = quantize_rows(weight.reshape(-1, 64))
    w_q, w_scale = w_q.reshape(weight.shape), w_scale.reshape(weight.shape[:2])
    try:
        if grouped:
            offsets = torch.tensor([5, 21, 48], dtype=torch.int32, device=device)
            ids = torch.repeat_interleave(torch.arange(3, device=device),
                                          torch.tensor([5, 16, 27], device=device))
            got = _grouped(q, q_scale, w_q, w_scale, offsets, ids, torch.bfloat16, True, True)
            want = _grouped(q, q_scale, w_q, w_scale, offsets, ids, torch.bfloat16, False)
        else:
            got = _scaled_mm(q, q_scale, w_q[0], w_scale[0][:, None], torch.bfloat16, True)
            want = _dequant_mm(q, q_scale, w_q[0], w_scale[0][:, None], torch.bfloat16)
    except (AttributeError, RuntimeError, NotImplementedError, TypeError, ValueError):
        return False  # AttributeError: a torch without these products (before 2.10)
    return bool(torch.allclose(got.float(), want.float(), rtol=2e-2, atol=2e-2))


def _ignored(name: str) -> bool:
    """llm-compressor's ignore list for Gemma 4 models (``lm_head``, ``re:.*embed.*``,
    ``re:.*router``, ``re:.*vision_tower.*``), matched as compressed-tensors matches it."""
    return name == "lm_head" or any(part in name for part in ("embed", "router", "vision_tower"))


def quantize_model(model: Any, *, dynamic: bool = True) -> int:
    """Quantize a loaded DiffusionGemma in place as llm-compressor's ``FP8_DYNAMIC`` recipe
    does (the benchmark's full-size random FP8 model, built on the device): every bias-free
    linear layer outside the ignore list becomes an ``Fp8Linear``, every experts module FP8,
    each weight scaled per output channel. A weight shared by several modules (the encoder's
    and the decoder's) is quantized once and replaced everywhere at once, so its bf16 copy is
    freed before the next is quantized. Returns how many weights were quantized."""
    linears: dict[int, list[str]] = {}
    experts: dict[int, list[str]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        if isinstance(module, torch.nn.Linear) and module.bias is None and not _ignored(name):
            linears.setdefault(id(module.weight), []).append(name)
        elif type(module).__name__.endswith("TextExperts"):
            experts.setdefault(id(module.gate_up_proj), []).append(name)
    for names in linears.values():
        layer = _fp8_linear(model.get_submodule(names[0]), dynamic)
        for name in names:
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, layer)
    for names in experts.values():
        _quantize_experts([model.get_submodule(name) for name in names], dynamic)
    register_fp8_experts()
    model.set_experts_implementation(FP8_EXPERTS)
    return len(linears) + 2 * len(experts)


def _fp8_linear(linear: torch.nn.Linear, dynamic: bool) -> Fp8Linear:
    layer = Fp8Linear(linear.in_features, linear.out_features, dynamic=dynamic,
                      device=linear.weight.device)
    layer.weight.data, layer.weight_scale.data = quantize_rows(linear.weight.data)
    return layer


def _quantize_experts(modules: list[Any], dynamic: bool) -> None:
    """The experts ``modules`` (sharing their weights) on one set of FP8 weights."""
    for name in ("gate_up_proj", "down_proj"):
        weight = getattr(modules[0], name).data
        q, scale = quantize_rows(weight.reshape(-1, weight.shape[-1]))
        del weight
        fp8 = torch.nn.Parameter(q.reshape(getattr(modules[0], name).shape), requires_grad=False)
        scales = torch.nn.Parameter(scale.reshape(fp8.shape[:2]), requires_grad=False)
        for module in modules:  # the last reference to the bf16 weight goes here
            setattr(module, name, fp8)
            setattr(module, f"{name}_scale", scales)
    for module in modules:
        module.fp8_dynamic, module.use_fp8 = dynamic, False
        module.fp8_fast_accum = module.fp8_fused = False
