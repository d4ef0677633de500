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

from app.inprocess.graphs import DEFAULT_KEY_SLOTS  # noqa: E402
from app.inprocess.kernels import grouped_experts  # noqa: E402
from app.inprocess.model import DecodeRow, PrefillJob  # noqa: E402
from tests.fixtures.tokens import random_ids  # noqa: E402

pytestmark = pytest.mark.engine

ATOL = 1e-5
LABELS = (3, 7, 11, 106, 200)
SLOTS = (0, 2, 5)


def _workload(model: Any) -> tuple[list[Any], list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    """Rows: 3 question suffixes on one 21-token document (past the window), one of them drawn
    twice, the document itself, prompts of 5 and 40 tokens; (prompt, canvas) per row."""
    doc = random_ids(21, 1)
    root = model.prefill([PrefillJob(None, doc)])[0]
    suffixes = [random_ids(n, 10 + n) for n in (2, 9, 19)]
    questions = model.prefill([PrefillJob(root, s) for s in suffixes])
    lone_prompts = [random_ids(5, 2), random_ids(40, 3)]
    lone = model.prefill([PrefillJob(None, p) for p in lone_prompts])
    canvases = [random_ids(16, 20 + k) for k in range(3)]
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
    from app.inprocess.packed import PackedBatch

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
    prompts = [random_ids(n, 40 + n) for n in (3, 17, 33)]
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
    from transformers.models.diffusion_gemma import modeling_diffusion_gemma as modeling

    from app.inprocess.kernels import rotary

    assert modeling.apply_rotary_pos_emb is rotary
    _today(model)
    assert "forward" not in norm.__dict__
    assert model.model.config._experts_implementation == "grouped_mm"
    assert modeling.apply_rotary_pos_emb is not rotary
    _new(model)


def test_packed_prefill_of_suffixes_equals_the_collated_prefill(model: Any) -> None:
    """Suffixes of 2, 9, 19 and 30 tokens on a 21-token document (window 16) and on a second,
    chained prefix, extended in one packed call: each entry equals encoding it alone."""
    doc = random_ids(21, 1)
    other = random_ids(6, 9)
    suffixes = [random_ids(n, 60 + n) for n in (2, 9, 19, 30)]
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


@pytest.fixture
def fixed(model: Any) -> Any:
    """The model reading through fixed layouts (eagerly: no CUDA here), a fresh arena."""
    _new(model)
    model.graphs, model._steps = True, None
    yield model
    model.graphs, model._steps = False, None


def test_fixed_layout_steps_answer_as_the_packed_path(fixed: Any) -> None:
    """Padded to a layout (3 groups of 5, 1, 1 rows -> 4 groups of 6 slots), every row reads what
    the packed call and today's path read; a second batch of the same layout refills the same
    buffers (stale prompt tokens masked) and is still exact."""
    from app.inprocess.packed import layout_for

    rows, _ = _workload(fixed)
    layout = layout_for(fixed.kinds, [r.entry for r in rows], 16)
    assert layout is not None and (layout.groups, layout.slots) == (4, 6)
    stepped = fixed.decode(rows)
    assert list(fixed.steps.steps) == [layout] and fixed.steps.fallbacks == 0
    fixed.graphs = False
    packed = fixed.decode(rows)
    rows_today, _ = _workload(_today(fixed))
    today = fixed.decode(rows_today)
    assert _max_diff(stepped, packed) < ATOL and _max_diff(stepped, today) < ATOL
    for x, y in zip(stepped, today, strict=True):
        assert x.argmax_ids.tolist() == y.argmax_ids.tolist()
    _new(fixed)
    fixed.graphs = True
    # the same layout, other prompts: shorter ones leave stale tokens of the first fill behind
    shorter = [DecodeRow(r.entry, r.canvas, r.slots, r.logprob_ids) for r in reversed(rows)]
    again = fixed.decode(shorter)
    assert len(fixed.steps.steps) == 1
    fixed.graphs = False
    assert _max_diff(again, fixed.decode(shorter)) < ATOL


def test_a_batch_the_arena_cannot_hold_reads_as_the_packed_path(fixed: Any) -> None:
    fixed.graph_key_slots = 64  # smaller than any layout of the workload
    try:
        rows, _ = _workload(fixed)
        stepped = fixed.decode(rows)
        assert fixed.steps.fallbacks == 1 and not fixed.steps.steps
        fixed.graphs = False
        assert _max_diff(stepped, fixed.decode(rows)) == 0.0
    finally:
        fixed.graph_key_slots = DEFAULT_KEY_SLOTS


def test_rotary_equals_transformers_rotary() -> None:
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import (
        DiffusionGemmaTextRotaryEmbedding,
    )

    from app.inprocess.kernels import rotary

    gen = torch.Generator().manual_seed(5)
    x = torch.randn((2, 7, 3, 32), generator=gen)
    angles = torch.rand((2, 7, 16), generator=gen) * 6.0
    cos = torch.cat((angles, angles), -1).cos()
    sin = torch.cat((angles, angles), -1).sin()
    ours = rotary(x, cos, sin, unsqueeze_dim=2)
    theirs = _transformers_rotary()(x, cos, sin, unsqueeze_dim=2)
    assert torch.allclose(ours, theirs, atol=1e-6)
    assert not torch.allclose(ours, x, atol=1e-2)  # it did rotate
    assert DiffusionGemmaTextRotaryEmbedding is not None


def _transformers_rotary() -> Any:
    from app.inprocess import kernels

    kernels._install_rotary(True)  # makes sure the original is saved
    assert kernels._TRANSFORMERS_ROTARY is not kernels.rotary
    return kernels._TRANSFORMERS_ROTARY


def test_grouped_experts_with_unused_experts(model: Any) -> None:
    """Expert offsets by binary search: experts no token chose get empty groups."""
    experts = model.model.model.decoder.layers[0].experts
    gen = torch.Generator().manual_seed(8)
    hidden = torch.randn((9, model.text_config.hidden_size), generator=gen)
    index = torch.tensor([[3, 0]] * 5 + [[0, 3]] * 4)  # experts 1 and 2 unused
    weights = torch.rand((9, 2), generator=gen)
    with torch.no_grad():
        ours = grouped_experts(experts, hidden, index, weights)
        theirs = grouped_mm_experts_forward(experts, hidden, index, weights)
    assert torch.allclose(ours, theirs, atol=ATOL)


def test_the_arena_is_sized_by_every_layer_of_a_slot(fixed: Any) -> None:
    """The step arena's share of free memory is counted in whole slots: a slot holds a key and a
    value of every layer of every kind, so the bytes the arena holds are its slots times
    ``slot_bytes`` (a count of one layer per kind let an arena at full size grow to its layer
    count times its share)."""
    from app.inprocess.graphs import slot_bytes

    rows, _ = _workload(fixed)
    fixed.graphs = True
    fixed.decode(rows)
    steps = fixed.steps
    slots = steps.arena[0][0].shape[0]
    per_slot = slot_bytes(rows[0].entry)
    assert steps.arena_bytes == slots * per_slot
    layers = sum(k.shape[0] for k, _ in rows[0].entry.kinds)
    assert layers > len(rows[0].entry.kinds)  # more than one layer per kind: the count matters
