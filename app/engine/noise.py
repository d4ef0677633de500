"""Deterministic noise. A canvas's seed comes from (run seed, replicate, decision, unit, draw),
and each answer slot gets an id drawn from that seed and its position; nothing else is noise.
A retried or resumed read is therefore byte-identical.

vLLM 0.33's own reader draws its one read's noise from the prompt instead (``reader_noise``):
the vllm layout sends that noise on the first draw, so it reads exactly what vLLM's
``/v1/systemone`` reads.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence

__all__ = ["derive_seed", "reader_noise", "reader_seed", "seed_canvas"]

_SEED_MASK = (1 << 63) - 1


def _hash63(payload: object, person: bytes) -> int:
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    digest = hashlib.blake2b(data, digest_size=8, person=person).digest()
    return int.from_bytes(digest, "big") & _SEED_MASK


def derive_seed(run_seed: int, replicate: int, decision_id: str, unit_key: str, draw: int) -> int:
    """A 63-bit seed: blake2b of the canonical JSON ``[run_seed, replicate, decision_id,
    unit_key, draw]``. ``unit_key`` is the comma-joined user question ids of the unit."""
    return _hash63([run_seed, replicate, decision_id, unit_key, draw], b"dreads.seed")


def seed_canvas(template_ids: Sequence[int], slot_positions: Sequence[int], seed: int,
                vocab_size: int) -> tuple[int, ...]:
    """The template with every slot overwritten by a seeded id in ``[0, vocab_size)``.

    Example::

        seed_canvas([5, 6, 7], [1], seed=42, vocab_size=1000)   # (5, <noise>, 7)
    """
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    canvas = list(template_ids)
    for pos in slot_positions:
        canvas[pos] = _hash63([seed, pos], b"dreads.noise") % vocab_size
    return tuple(canvas)


def _prompt_digest(prompt_ids: Sequence[int]) -> bytes:
    # json.dumps with its default separators, as vLLM's reader hashes the ids
    return hashlib.sha256(json.dumps(list(prompt_ids)).encode()).digest()


def reader_noise(prompt_ids: Sequence[int], n: int, vocab_size: int) -> tuple[int, ...]:
    """vLLM 0.33's reader noise: ``n`` ids drawn in order from ``random.Random`` seeded with
    the sha256 of the JSON of the prompt ids (before the thought block)."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    rng = random.Random(_prompt_digest(prompt_ids))
    return tuple(rng.randrange(vocab_size) for _ in range(n))


def reader_seed(prompt_ids: Sequence[int]) -> int:
    """A 63-bit number naming noise drawn from a prompt (what such a draw records as its
    seed: the noise itself is not derived from it)."""
    return int.from_bytes(_prompt_digest(prompt_ids)[:8], "big") & _SEED_MASK
