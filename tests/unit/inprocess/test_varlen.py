"""Prompts prefilled end to end in one row (``VarlenPrefill``) against encoding each prompt
alone, in float32 on a tiny model (the compiled encoder layers:
``tests/integration/inprocess/test_compiled.py``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from app.inprocess.executor import _budget_chunks  # noqa: E402
from app.inprocess.model import PrefillJob  # noqa: E402
from app.inprocess.varlen import (  # noqa: E402
    VarlenPrefill,
    one_call_attention_works,
)
from tests.fixtures.tokens import random_ids  # noqa: E402

pytestmark = pytest.mark.engine

ATOL = 1e-5


def _reference_attention(q: Any, k: Any, v: Any, window: int | None) -> Any:
    """One prompt's causal (and windowed) attention, heads expanded, as plain math."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], 1)
    n = q.shape[2]
    t = torch.arange(n)
    allowed = t[:, None] >= t[None, :]
    if window:
        allowed &= (t[:, None] - t[None, :]) < window
    scores = (q @ k.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize(("dim", "window"), [(32, None), (32, 8), (512, None)])
def test_packed_attention_sees_each_prompt_alone(model: Any, dim: int, window: int | None
                                                 ) -> None:
    """Prompts of 3, 20 and 9 tokens in one row: each token attends causally within its own
    prompt only (within the window when one is set; 512-wide grouped heads too)."""
    lengths = [3, 20, 9]
    packed = VarlenPrefill(model.kinds, lengths)
    gen = torch.Generator().manual_seed(1)
    total = sum(lengths)
    q = torch.randn((1, 4, total, dim), generator=gen)
    k = torch.randn((1, 2, total, dim), generator=gen)
    v = torch.randn((1, 2, total, dim), generator=gen)
    module = SimpleNamespace(sliding_window=window, scaling=1.0)
    out = packed.attend(module, q, k, v)  # (1, total, heads, dim)
    assert out.shape == (1, total, 4, dim)
    at = 0
    for n in lengths:
        span = slice(at, at + n)
        want = _reference_attention(q[:, :, span], k[:, :, span], v[:, :, span], window)
        assert torch.allclose(out[:, span].transpose(1, 2), want, atol=ATOL)
        at += n


@pytest.mark.skipif(not torch.cuda.is_available(), reason="variable-length kernels: a GPU")
@pytest.mark.parametrize(("heads", "kv_heads", "dim", "window"),
                         [(16, 8, 256, None), (16, 8, 256, 100), (16, 2, 512, None)])
def test_one_kernel_call_on_a_gpu_attends_as_a_call_per_prompt(
        model: Any, heads: int, kv_heads: int, dim: int, window: int | None) -> None:
    """In bf16 on a GPU the row's attention is one variable-length kernel call (flash with
    grouped heads and the sliding window, or the memory-efficient kernel for 512-wide heads);
    against float32 math per prompt it is as close as a bf16 SDPA call per prompt."""
    lengths = [1, 37, 300, 130, 9, 257]
    packed = VarlenPrefill(model.kinds, lengths)
    gen = torch.Generator().manual_seed(2)
    total = sum(lengths)
    q, k, v = (torch.randn((1, n, total, dim), generator=gen)
               for n in (heads, kv_heads, kv_heads))
    scale = dim ** -0.5
    module = SimpleNamespace(sliding_window=window, scaling=scale)
    half = [t.to("cuda", torch.bfloat16) for t in (q, k, v)]
    assert one_call_attention_works(half[0].device, torch.bfloat16, heads, kv_heads, dim,
                                    window)  # else attend runs a call per prompt
    one_call = packed.attend_varlen(scale, window, *half).float().cpu()
    assert torch.equal(packed.attend(module, *half).float().cpu(), one_call)
    per_prompt = packed.attend_each(scale, window, *half).float().cpu()
    assert one_call.shape == per_prompt.shape == (1, total, heads, dim)
    at, worst = 0, [0.0, 0.0]
    for n in lengths:
        span = slice(at, at + n)
        want = _reference_attention(q[:, :, span] * scale, k[:, :, span], v[:, :, span],
                                    window).transpose(1, 2)
        for i, got in enumerate((one_call, per_prompt)):
            worst[i] = max(worst[i], float((got[:, span] - want).abs().max()))
        at += n
    assert worst[0] <= 2 * worst[1] + 1e-3, worst


def test_a_device_without_the_one_call_kernels_keeps_the_call_per_prompt() -> None:
    """The probe answers no where the variable-length kernels do not run (the CPU has none),
    and a CPU row's attention is the call per prompt."""
    for heads, kv_heads, dim, window in ((16, 8, 256, None), (16, 8, 256, 100),
                                         (16, 2, 512, None)):
        assert not one_call_attention_works(torch.device("cpu"), torch.bfloat16, heads,
                                            kv_heads, dim, window)


def test_varlen_prefill_equals_each_prompt_encoded_alone(model: Any) -> None:
    """Prompts of 3 to 40 tokens (past the 16-token window) in one packed call: every entry
    holds the keys and values transformers' own encoder gives that prompt alone."""
    prompts = [random_ids(n, 70 + n) for n in (3, 40, 17, 1, 33)]
    model.packed = False
    alone = [model.prefill([PrefillJob(None, p)])[0] for p in prompts]
    model.packed = True
    packed = model.prefill([PrefillJob(None, p) for p in prompts])
    for a, b in zip(packed, alone, strict=True):
        assert a.length == b.length and a.parent is None
        for (ka, va), (kb, vb) in zip(a.kinds, b.kinds, strict=True):
            assert ka.shape == kb.shape
            assert torch.allclose(ka, kb, atol=ATOL) and torch.allclose(va, vb, atol=ATOL)


def test_packed_budget_counts_real_tokens() -> None:
    """Right-padded calls hold rows x longest tokens; packed calls only the prompts' tokens."""
    jobs = [((i,), PrefillJob(None, tuple(range(n)))) for i, n in enumerate((100, 10, 10, 10))]
    padded = [len(c) for c in _budget_chunks(jobs, 200, 64, padded=True)]
    packed = [len(c) for c in _budget_chunks(jobs, 200, 64, padded=False)]
    assert padded == [2, 2] and packed == [4]
    assert [len(c) for c in _budget_chunks(jobs, 10_000, 3, padded=False)] == [3, 1]


def test_the_compile_setting_reaches_the_loaded_model(tmp_path: Any) -> None:
    """``DREADS_ENGINE_COMPILE`` (UpstreamConfig.compile) loads the model with its encoder layers
    to be compiled; without it they run eagerly."""
    from app.connect.factory import UpstreamConfig
    from app.inprocess import make_tiny_dir, make_transformers_upstream

    make_tiny_dir(tmp_path / "tiny")
    path = str(tmp_path / "tiny")
    for compiled in (False, True):
        upstream = make_transformers_upstream(UpstreamConfig(
            engine="transformers", model_path=path, compile=compiled))
        assert upstream.model.compiled is compiled
