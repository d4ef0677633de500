"""The packed decoder path and the kernels against transformers' own path, in float32 on a tiny
model: same label log-probs within 1e-5, same argmax.

"Today's path" is ``ReadModel(packed=False, kernels=False)``: a collated ``DynamicCache`` with a
padding mask (prefill and decode), transformers' RMSNorm and grouped experts.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from transformers import DynamicCache  # noqa: E402
from transformers.integrations.moe import grouped_mm_experts_forward  # noqa: E402

from app.upstream.transformers_engine import ReadModel, build_tiny_model  # noqa: E402
from app.upstream.transformers_engine.kernels import grouped_experts  # noqa: E402
from app.upstream.transformers_engine.model import DecodeRow, PrefillJob  # noqa: E402

pytestmark = pytest.mark.engine

ATOL = 1e-5
LABELS = (3, 7, 11, 106, 200)
SLOTS = (0, 2, 5)


def _ids(n: int, seed: int) -> tuple[int, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(5, 500, (n,), generator=gen).tolist())


@pytest.fixture(scope="module")
def model() -> Any:
    """3 layers (2 sliding, window 16, and 1 full), float32."""
    return ReadModel(build_tiny_model(512, layers=3, seed=3))


def _workload(model: Any) -> tuple[list[Any], list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    """Rows: 3 question suffixes on one 21-token document (past the window), one of them drawn
    twice, the document itself, prompts of 5 and 40 tokens; (prompt, canvas) per row."""
    doc = _ids(21, 1)
    root = model.prefill([PrefillJob(None, doc)])[0]
    suffixes = [_ids(n, 10 + n) for n in (2, 9, 19)]
    questions = model.prefill([PrefillJob(root, s) for s in suffixes])
    lone_prompts = [_ids(5, 2), _ids(40, 3)]
    lone = model.prefill([PrefillJob(None, p) for p in lone_prompts])
    canvases = [_ids(16, 20 + k) for k in range(3)]
    plan = [(questions[0], doc + suffixes[0], 0), (lone[1], lone_prompts[1], 1),
            (questions[1], doc + suffixes[1], 1), (questions[0], doc + suffixes[0], 2),
            (root, doc, 0), (questions[2], doc + suffixes[2], 2), (lone[0], lone_prompts[0], 0)]
    rows = [DecodeRow(entry, canvases[c], SLOTS, LABELS) for entry, _, c in plan]
    return rows, [(prompt, canvases[c]) for _, prompt, c in plan]


def _today(model: Any) -> Any:
    model.packed, model.kernels = False, False
    return model


def _new(model: Any) -> Any:
    model.packed, model.kernels = True, True
    return model


def _max_diff(a: Any, b: Any) -> float:
    return max(float((x.logprobs - y.logprobs).abs().max()) for x, y in zip(a, b, strict=True))


def test_packed_path_with_kernels_equals_todays_path(model: Any) -> None:
    """Same prompts prefilled and read both ways (each way prefills its own entries)."""
    rows_today, _ = _workload(_today(model))
    today = model.decode(rows_today)
    rows_new, _ = _workload(_new(model))
    new = model.decode(rows_new)
    assert _max_diff(new, today) < ATOL
    for x, y in zip(new, today, strict=True):
        assert x.argmax_ids.tolist() == y.argmax_ids.tolist()
        assert torch.allclose(x.argmax_logprobs, y.argmax_logprobs, atol=ATOL)


def test_packed_rows_answer_as_isolated_single_reads(model: Any) -> None:
    """A state's questions and draws packed in one call == each read alone == the plain
    unbatched transformers forward of the whole prompt."""
    rows, wanted = _workload(_new(model))
    packed = model.decode(rows)
    alone = [model.decode([row])[0] for row in rows]
    assert _max_diff(packed, alone) < ATOL
    for result, (prompt, canvas) in zip(packed, wanted, strict=True):
        cache = DynamicCache(config=model.text_config)
        with torch.no_grad():
            model.model.model.encoder(input_ids=torch.tensor([prompt]), cache=cache)
            logits = model.model(cache=cache, decoder_input_ids=torch.tensor([canvas])).logits
        reference = torch.log_softmax(logits[0, list(SLOTS)], -1)[:, list(LABELS)]
        assert torch.allclose(result.logprobs, reference, atol=ATOL)


def test_the_group_reads_its_shared_document_once(model: Any) -> None:
    """Rows on one document form one group; a lone prompt its own; the key buffer holds the
    document once plus each question's own tokens and each row's canvas."""
    from app.upstream.transformers_engine.packed import PackedBatch

    rows, _ = _workload(_new(model))
    batch = PackedBatch(model.kinds, [r.entry for r in rows], 16, query_heads=2,
                        device=model.device, dtype=torch.float32)
    assert sorted(len(g) for g in batch.groups) == [1, 1, 5]
    full = batch.kinds[model.kinds.sliding.index(False)]  # keeps every prompt token
    group = next(i for i, g in enumerate(batch.groups) if len(g) == 5)
    assert full.keys.shape[3] == -(-(21 + 2 + 9 + 19 + 5 * 16) // 16) * 16
    # the first row (question 0, 2 own tokens) attends to 21 + 2 prompt keys and its 16 canvas
    # keys, for each of its query heads and positions
    first = full.bias[group, 0, :16]
    assert ((first == 0).sum(-1) == 21 + 2 + 16).all()


def test_prefill_without_mask_equals_the_masked_prefill(model: Any) -> None:
    prompts = [_ids(n, 40 + n) for n in (3, 17, 33)]
    _today(model)
    masked = model.prefill([PrefillJob(None, p) for p in prompts])
    _new(model)
    plain = model.prefill([PrefillJob(None, p) for p in prompts])
    for a, b in zip(masked, plain, strict=True):
        assert a.length == b.length
        for (ka, va), (kb, vb) in zip(a.kinds, b.kinds, strict=True):
            assert ka.shape == kb.shape
            assert torch.allclose(ka, kb, atol=ATOL) and torch.allclose(va, vb, atol=ATOL)


def test_reads_leave_cached_entries_untouched(model: Any) -> None:
    rows, _ = _workload(_new(model))
    before = [[(k.clone(), v.clone()) for k, v in r.entry.kinds] for r in rows]
    model.decode(rows)
    for row, saved in zip(rows, before, strict=True):
        for (k, v), (k0, v0) in zip(row.entry.kinds, saved, strict=True):
            assert torch.equal(k, k0) and torch.equal(v, v0)


def test_grouped_experts_equal_transformers_grouped_mm(model: Any) -> None:
    experts = model.model.model.decoder.layers[0].experts
    gen = torch.Generator().manual_seed(7)
    hidden = torch.randn((37, model.text_config.hidden_size), generator=gen)
    index = torch.randint(0, experts.num_experts, (37, 2), generator=gen)
    weights = torch.rand((37, 2), generator=gen)
    with torch.no_grad():
        ours = grouped_experts(experts, hidden, index, weights)
        theirs = grouped_mm_experts_forward(experts, hidden, index, weights)
    assert torch.allclose(ours, theirs, atol=ATOL)


def test_kernels_switch_off_cleanly(model: Any) -> None:
    norm = model.model.model.decoder.layers[0].input_layernorm
    _new(model)
    assert "forward" in norm.__dict__
    assert model.model.config._experts_implementation == "dreads_grouped"
    _today(model)
    assert "forward" not in norm.__dict__
    assert model.model.config._experts_implementation == "grouped_mm"
    _new(model)


def test_packed_prefill_of_suffixes_equals_the_collated_prefill(model: Any) -> None:
    """Suffixes of 2, 9, 19 and 30 tokens on a 21-token document (window 16) and on a second,
    chained prefix, extended in one packed call: each entry equals encoding it alone."""
    doc = _ids(21, 1)
    other = _ids(6, 9)
    suffixes = [_ids(n, 60 + n) for n in (2, 9, 19, 30)]
    for setup in (_today, _new):
        setup(model)
        root = model.prefill([PrefillJob(None, doc)])[0]
        chained = model.prefill([PrefillJob(root, other)])[0]
        jobs = [PrefillJob(root, s) for s in suffixes] + [PrefillJob(chained, suffixes[1]),
                                                          PrefillJob(None, suffixes[2])]
        if setup is _today:
            expected = [model.prefill([job])[0] for job in jobs]
        else:
            got = model.prefill(jobs)
    for a, b in zip(got, expected, strict=True):
        assert a.length == b.length and (a.parent is None) == (b.parent is None)
        for (ka, va), (kb, vb) in zip(a.kinds, b.kinds, strict=True):
            assert ka.shape == kb.shape
            assert torch.allclose(ka, kb, atol=ATOL) and torch.allclose(va, vb, atol=ATOL)
