"""The in-process engine's torch.compile paths against their eager ones: the encoder layers
compiled (inductor), and the fused FP8 input quantization (one compiled kernel). Each compiles
graphs for tens of seconds on the CPU, so they run here and not in the unit tier."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from app.inprocess import ReadModel, build_tiny_model  # noqa: E402
from app.inprocess.fp8 import fused_quantize_rows, quantize_rows  # noqa: E402
from app.inprocess.model import DecodeRow, PrefillJob  # noqa: E402
from tests.fixtures.tokens import random_ids  # noqa: E402

pytestmark = pytest.mark.engine

ATOL = 1e-5


@pytest.fixture(scope="module")
def model() -> Any:
    """3 layers (2 sliding, window 16, and 1 full), float32."""
    return ReadModel(build_tiny_model(512, layers=3, seed=3))


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                    reason="inductor compiles C++ on the CPU")
def test_compiled_encoder_answers_as_the_eager_one(model: Any) -> None:
    """The encoder layers through torch.compile (inductor on the CPU here): the same entries
    and the same label log-probs, for calls of several shapes (one compiled graph each kind)."""
    prompts = [random_ids(n, 90 + n) for n in (5, 37, 12)]
    doc = random_ids(21, 1)
    canvas = random_ids(16, 20)

    def read() -> tuple[list[Any], Any]:
        entries = model.prefill([PrefillJob(None, p) for p in prompts])
        root = model.prefill([PrefillJob(None, doc)])[0]
        entries += model.prefill([PrefillJob(root, s) for s in prompts[:2]])
        rows = [DecodeRow(e, canvas, (0, 2, 5), (3, 7, 11)) for e in entries]
        return entries, model.decode(rows)

    model.packed, model.compiled = True, False
    eager_entries, eager = read()
    model.compiled = True
    try:
        compiled_entries, compiled = read()
    finally:
        model.compiled = False
    assert model._layers is not None  # the compiled layers were used
    for a, b in zip(compiled_entries, eager_entries, strict=True):
        for (ka, va), (kb, vb) in zip(a.kinds, b.kinds, strict=True):
            assert torch.allclose(ka, kb, atol=ATOL) and torch.allclose(va, vb, atol=ATOL)
    for x, y in zip(compiled, eager, strict=True):
        assert torch.allclose(x.logprobs, y.logprobs, atol=ATOL)
        assert x.argmax_ids.tolist() == y.argmax_ids.tolist()


def test_the_fused_quantization_gives_the_eager_values() -> None:
    """``fused_quantize_rows`` (one compiled kernel; on the GPU the engine keeps it only where
    a probe at load finds the same) gives ``quantize_rows``' FP8 values and scales bit for bit,
    for rows of every magnitude, two widths and two row counts (one compiled graph per
    width)."""
    torch.manual_seed(0)
    for rows, width in ((37, 64), (5, 64), (9, 48)):
        x = (torch.randn(rows, width) * torch.logspace(-4, 4, rows)[:, None]).to(torch.bfloat16)
        got, got_scale = fused_quantize_rows(x)
        want, want_scale = quantize_rows(x)
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
        assert torch.equal(got_scale, want_scale)
