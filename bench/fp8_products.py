"""The FP8 engine's pieces timed one by one on a GPU, beside their bf16 counterparts, at the
full-size DiffusionGemma's shapes (hidden 2816, 128 experts of 704, top 8): the per-row input
quantization (eager and fused), the dense products (``scaled_mm`` against a bf16 ``mm``), the
gather of each (token, expert) row, and the grouped expert products (``scaled_grouped_mm``
against bf16 ``grouped_mm``), each with and without fast accumulation where torch offers it.

Each time is the median of ``triton.testing.do_bench`` over fresh random inputs (never zeros);
each fast variant is checked against its reference first (the grouped products against a
float32 product of the same FP8 values, expert by expert: every variant writes bf16, so about
1e-3 of the relative error is that rounding).

    python bench/fp8_products.py                 # one GPU of compute capability 9.0 (H200)
    python bench/fp8_products.py --tokens 2048,16384
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from transformers.integrations.moe import _grouped_linear

from app.inprocess.fp8 import fused_quantize_rows, quantize_rows
from app.inprocess.kernels import Routing

HIDDEN, EXPERT_WIDTH, EXPERTS, TOP_K = 2816, 704, 128, 8
DENSE = {"q_proj": (HIDDEN, 16 * 256), "o_proj (global)": (16 * 512, HIDDEN),
         "mlp gate_up": (HIDDEN, 2 * 2112), "mlp down": (2112, HIDDEN)}
ROWS = F.ScalingType.RowWise


def timed(fn: Callable[[], Any]) -> float:
    """Median milliseconds."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=200, return_mode="median"))


def tflops(flops: float, ms: float) -> str:
    return f"{flops / ms / 1e9:7.0f} TFLOP/s"


def gbs(nbytes: float, ms: float) -> str:
    return f"{nbytes / ms / 1e6:7.0f} GB/s"


def quantization(tokens: int, device: torch.device) -> None:
    for rows, k in ((tokens, HIDDEN), (tokens, 16 * 512), (tokens * TOP_K, EXPERT_WIDTH)):
        x = torch.randn((rows, k), device=device, dtype=torch.bfloat16) * 3
        want, want_scale = quantize_rows(x)
        got, got_scale = fused_quantize_rows(x)
        differ = (got.view(torch.uint8) != want.view(torch.uint8)).float().mean().item()
        scale_gap = (got_scale - want_scale).abs().max().item()
        eager = timed(lambda x=x: quantize_rows(x))
        fused = timed(lambda x=x: fused_quantize_rows(x))
        moved = rows * k * 3  # read bf16, write FP8
        print(f"quantize ({rows}, {k}): eager {eager:.3f} ms ({gbs(moved, eager)}), fused "
              f"{fused:.3f} ms ({gbs(moved, fused)}); values differing {differ:.2e}, "
              f"max |d scale| {scale_gap:.1e}", flush=True)


def dense(tokens: int, device: torch.device) -> None:
    for name, (k, n) in DENSE.items():
        x = torch.randn((tokens, k), device=device, dtype=torch.bfloat16)
        w = torch.randn((n, k), device=device, dtype=torch.bfloat16) / k**0.5
        q, q_scale = quantize_rows(x)
        wq, w_scale = quantize_rows(w)
        flops = 2.0 * tokens * k * n
        bf16 = timed(lambda x=x, w=w: x @ w.t())
        line = f"dense {name} ({tokens}x{k} @ {k}x{n}): bf16 mm {bf16:.3f} ms {tflops(flops, bf16)}"
        for fast in (False, True):
            def fp8(q=q, wq=wq, qs=q_scale, ws=w_scale, fast=fast) -> torch.Tensor:
                return F.scaled_mm(q, wq.t(), qs, ROWS, ws.t(), ROWS, output_dtype=torch.bfloat16,
                                   use_fast_accum=fast)
            ms = timed(fp8)
            line += f"; scaled_mm{' fast' if fast else ''} {ms:.3f} ms {tflops(flops, ms)}"
        print(line, flush=True)


def grouped(tokens: int, device: torch.device, skew: bool) -> None:
    gen = torch.Generator(device=device).manual_seed(1)
    logits = torch.randn((tokens, EXPERTS), device=device, generator=gen)
    if skew:  # a few hot experts, as trained routers have
        logits += torch.linspace(3, 0, EXPERTS, device=device)
    top_k_index = logits.topk(TOP_K, dim=-1).indices
    routed = Routing.of(top_k_index, EXPERTS)
    hidden = torch.randn((tokens, HIDDEN), device=device, dtype=torch.bfloat16)
    rows = tokens * TOP_K
    kind = "skewed" if skew else "uniform"
    source = routed.source
    q = quantize_rows(hidden)[0]
    gathers = {"bf16 rows": lambda: hidden[source], "fp8 rows": lambda: q[source]}
    print(f"gather {rows} rows of {HIDDEN} ({kind}): " + "; ".join(
        f"{name} {timed(fn):.3f} ms" for name, fn in gathers.items()), flush=True)
    for name, (n, k) in {"gate_up": (2 * EXPERT_WIDTH, HIDDEN),
                         "down": (HIDDEN, EXPERT_WIDTH)}.items():
        w = torch.randn((EXPERTS, n, k), device=device, dtype=torch.bfloat16) / k**0.5
        a = torch.randn((rows, k), device=device, dtype=torch.bfloat16)
        aq, a_scale = quantize_rows(a)
        wq, w_scale = quantize_rows(w.reshape(-1, k))
        wq, w_scale = wq.reshape(w.shape), w_scale.reshape(EXPERTS, n)
        flops = 2.0 * rows * k * n
        bf16 = timed(lambda a=a, w=w: _grouped_linear(a, w, routed.offsets))
        line = (f"grouped {name} ({kind}, {rows} rows, {k} -> {n}): bf16 grouped_mm {bf16:.3f} ms "
                f"{tflops(flops, bf16)}")
        want = torch.empty((rows, n), device=device)  # float32, expert by expert
        start = 0
        for e, end in enumerate(routed.offsets.tolist()):
            want[start:end] = aq[start:end].float() @ wq[e].float().t()
            start = end
        want *= a_scale * w_scale[routed.expert_ids]
        bf16_gap = ((_grouped_linear(aq.to(torch.bfloat16), wq.to(torch.bfloat16),
                                     routed.offsets).float() * a_scale
                     * w_scale[routed.expert_ids] - want).norm() / want.norm()).item()
        line += f" (dequantized in bf16: rel. error {bf16_gap:.1e})"
        for fast in (False, True):
            def fp8(aq=aq, wq=wq, a_scale=a_scale, w_scale=w_scale, fast=fast) -> torch.Tensor:
                grouped_mm: Any = F.__dict__["scaled_grouped_mm"]
                return grouped_mm(aq, wq.transpose(-2, -1), a_scale.reshape(-1), ROWS, w_scale,
                                  ROWS, offs=routed.offsets, output_dtype=torch.bfloat16,
                                  use_fast_accum=fast)
            try:
                gap = ((fp8().float() - want).norm() / want.norm()).item()
                ms = timed(fp8)
            except (RuntimeError, TypeError) as exc:
                line += f"; scaled_grouped_mm{' fast' if fast else ''} failed: {str(exc)[:120]}"
                continue
            line += (f"; scaled_grouped_mm{' fast' if fast else ''} {ms:.3f} ms "
                     f"{tflops(flops, ms)} (rel. error {gap:.1e})")
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="2048,16384")
    args = parser.parse_args()
    device = torch.device("cuda")
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}", flush=True)
    with torch.inference_mode():
        for tokens in (int(t) for t in args.tokens.split(",")):
            quantization(tokens, device)
            print(f"compiled graphs so far: {torch._dynamo.utils.counters['stats']}", flush=True)
            dense(tokens, device)
            for skew in (False, True):
                grouped(tokens, device, skew)


if __name__ == "__main__":
    main()
