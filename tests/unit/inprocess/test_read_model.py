"""The read forwards of the transformers engine against plain transformers calls on a tiny model.

The reference for every read is the unbatched recipe: encoder prefill of one prompt into a fresh
cache, then ``DiffusionGemmaForBlockDiffusion(cache=..., decoder_input_ids=canvas).logits``,
log-softmax at the slots.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from transformers import DynamicCache  # noqa: E402

from app.inprocess.model import DecodeRow, PrefillJob  # noqa: E402
from tests.fixtures.tokens import random_ids  # noqa: E402

pytestmark = pytest.mark.engine

ATOL = 1e-5
IDS = (3, 7, 11, 106)
SLOTS = (2, 5)


def _ids(n: int, seed: int) -> tuple[int, ...]:
    return random_ids(n, seed, 800)


def _reference(model: Any, prompt: tuple[int, ...], canvas: tuple[int, ...]) -> Any:
    """Full-vocabulary log-probs (len(SLOTS), vocab) of one unbatched read."""
    cache = DynamicCache(config=model.text_config)
    with torch.no_grad():
        model.model.model.encoder(input_ids=torch.tensor([prompt]), cache=cache)
        logits = model.model(cache=cache, decoder_input_ids=torch.tensor([canvas])).logits
    return torch.log_softmax(logits[0, list(SLOTS)], dim=-1)


def _close(result: Any, reference: Any) -> bool:
    return bool(torch.allclose(result.logprobs, reference[:, list(IDS)], atol=ATOL))


PROMPTS = {"long": _ids(41, 1), "short": _ids(9, 2), "mid": _ids(23, 3)}
CANVAS = _ids(16, 4)


def test_single_read_equals_the_full_forward(tiny_read_model: Any) -> None:
    """Slot-only logits (hidden rows -> lm_head -> softcap) equal the model's own logits."""
    entry = tiny_read_model.prefill([PrefillJob(None, PROMPTS["long"])])[0]
    result = tiny_read_model.decode([DecodeRow(entry, CANVAS, SLOTS, IDS)])[0]
    reference = _reference(tiny_read_model, PROMPTS["long"], CANVAS)
    assert _close(result, reference)
    assert result.argmax_ids.tolist() == reference.argmax(-1).tolist()
    assert torch.allclose(result.argmax_logprobs, reference.max(-1).values, atol=ATOL)


def test_mixed_lengths_in_one_batch_equal_unpadded_reads(tiny_read_model: Any) -> None:
    """Prompts of 41, 9 and 23 tokens (window 16) prefilled and decoded together, draws mixed."""
    names = list(PROMPTS)
    entries = tiny_read_model.prefill([PrefillJob(None, PROMPTS[n]) for n in names])
    canvases = [CANVAS, CANVAS[::-1], CANVAS]
    rows = [DecodeRow(e, c, SLOTS, IDS) for e, c in zip(entries, canvases, strict=True)]
    rows.append(DecodeRow(entries[0], CANVAS[::-1], SLOTS, IDS))  # a second draw of "long"
    results = tiny_read_model.decode(rows)
    expected = [(PROMPTS[n], c) for n, c in zip(names, canvases, strict=True)]
    expected.append((PROMPTS["long"], CANVAS[::-1]))
    for result, (prompt, canvas) in zip(results, expected, strict=True):
        assert _close(result, _reference(tiny_read_model, prompt, canvas))


def test_batched_draws_equal_single_draws(tiny_read_model: Any) -> None:
    entry = tiny_read_model.prefill([PrefillJob(None, PROMPTS["mid"])])[0]
    canvases = [_ids(16, 10 + k) for k in range(4)]
    batched = tiny_read_model.decode([DecodeRow(entry, c, SLOTS, IDS) for c in canvases])
    for canvas, result in zip(canvases, batched, strict=True):
        single = tiny_read_model.decode([DecodeRow(entry, canvas, SLOTS, IDS)])[0]
        assert torch.allclose(result.logprobs, single.logprobs, atol=ATOL)
        assert result.argmax_ids.tolist() == single.argmax_ids.tolist()


def test_a_prompt_extended_from_a_cached_prefix_equals_the_whole_prompt(
        tiny_read_model: Any) -> None:
    """A shared prefix (system + document) encoded once, each question's suffix after it."""
    prompt = PROMPTS["long"]
    prefix = tiny_read_model.prefill([PrefillJob(None, prompt[:30])])[0]
    suffixes = [prompt[30:], prompt[30:33]]
    extended = tiny_read_model.prefill([PrefillJob(prefix, s) for s in suffixes])
    assert [e.length for e in extended] == [41, 33]
    results = tiny_read_model.decode([DecodeRow(e, CANVAS, SLOTS, IDS) for e in extended])
    assert _close(results[0], _reference(tiny_read_model, prompt, CANVAS))
    assert _close(results[1], _reference(tiny_read_model, prompt[:33], CANVAS))
    nested = tiny_read_model.prefill([PrefillJob(extended[1], prompt[33:])])[0]  # a chain of 3
    again = tiny_read_model.decode([DecodeRow(nested, CANVAS, SLOTS, IDS)] * 2)
    assert _close(again[1], _reference(tiny_read_model, prompt, CANVAS))
    long_suffix = tiny_read_model.prefill([PrefillJob(prefix, _ids(20, 5))])[0]  # > window
    alone = tiny_read_model.decode([DecodeRow(long_suffix, CANVAS, SLOTS, IDS),
                                    DecodeRow(extended[0], CANVAS, SLOTS, IDS)])
    assert _close(alone[0], _reference(tiny_read_model, prompt[:30] + _ids(20, 5), CANVAS))


def test_reads_and_extensions_leave_cached_entries_unchanged(tiny_read_model: Any) -> None:
    parent = tiny_read_model.prefill([PrefillJob(None, PROMPTS["long"])])[0]
    child = tiny_read_model.prefill([PrefillJob(parent, _ids(6, 9))])[0]
    before = [(k.clone(), v.clone()) for e in (parent, child) for k, v in e.kinds]
    tiny_read_model.decode([DecodeRow(e, _ids(16, k), SLOTS, IDS)
                            for k, e in enumerate((parent, child, child))])
    tiny_read_model.decode([DecodeRow(child, _ids(16, k), SLOTS, IDS) for k in range(2)])
    tiny_read_model.prefill([PrefillJob(child, _ids(5, 9)), PrefillJob(None, _ids(7, 8))])
    after = [(k, v) for e in (parent, child) for k, v in e.kinds]
    for (k0, v0), (k1, v1) in zip(before, after, strict=True):
        assert torch.equal(k0, k1)
        assert torch.equal(v0, v1)


def test_constrained_reads_renormalise_over_the_requested_ids(tiny_read_model: Any) -> None:
    entry = tiny_read_model.prefill([PrefillJob(None, PROMPTS["short"])])[0]
    free, constrained = tiny_read_model.decode([
        DecodeRow(entry, CANVAS, SLOTS, IDS), DecodeRow(entry, CANVAS, SLOTS, IDS, True)])
    assert torch.allclose(constrained.logprobs.exp().sum(-1), torch.ones(len(SLOTS)))
    assert torch.allclose(constrained.logprobs, torch.log_softmax(free.logprobs, -1), atol=ATOL)
    assert set(constrained.argmax_ids.tolist()) <= set(IDS)
