"""The simulator's model: deterministic logprob rows, an optional answer key.

At an answer slot the candidate labels are the request's ``logprob_token_ids``. Their logits:

- without a key, a stable hash of (state, instructions, id): answers are a function of the prompt;
  a read with images hashes their sha256s in too, so another picture gives another answer;
- with a key, the true label stands ``separation + latent`` above the others, where ``latent`` is
  a deterministic N(0, 1) per (state, question): some positives are hard. At the default
  separation of 1.5 one yes/no read ranks with an AUC of about 0.96 (1.8: 0.98);
- plus ``noise`` x N(0, 1) drawn from (the noise token at the slot, the slot, the id): different
  noise draws give different reads, the same body the same read;
- ``miscalibration`` m: logits times (1 + m) and the first label (yes / A / 1) shifted by -m, so
  probabilities are miscalibrated while the ranking of that label stays;
- ``joint_interference`` j: on a canvas whose slots ask more than one question (a joint read),
  the true label's lead ``separation + latent`` is scaled by ``1 - j`` and the first label
  (yes / A / 1) is pushed down by ``JOINT_PUSH * j`` logits: the questions of one canvas
  interfere, and joint reads rank worse and lean to "no", so their recall drops (the field
  report measured recall 0.49 joint against 0.84 isolated; j = 0.6 plants a drop of that kind).

Label mass is 0.90-0.99 normally (fixed per question); a ``low_mass`` read puts most mass on
a non-label argmax. Every other position emits its canvas token with high probability.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from app.sim.key import AnswerKey

__all__ = ["Row", "ScoreOptions", "Scorer", "SlotQuestion"]

_STD = NormalDist()
_FIRST_LABELS = frozenset({"yes", "a", "1"})
#: logits the first label loses on a joint read per unit of ``joint_interference``
JOINT_PUSH = 2.0


@dataclass(frozen=True)
class ScoreOptions:
    noise: float = 0.5
    separation: float = 1.5
    miscalibration: float = 0.0
    seed: int = 0
    joint_interference: float = 0.0


@dataclass(frozen=True)
class Row:
    """One canvas position's answer: the emitted argmax and the requested ids' logprobs."""

    argmax_id: int
    argmax_logprob: float
    logprobs: Mapping[int, float]


@dataclass(frozen=True)
class SlotQuestion:
    """The question asked at one slot: its state and instructions (what the key and the hashes
    go by) and how the prompt labels its options (``key_label``: dreads label -> prompt's)."""

    state: str
    instructions: str
    key_label: Any = None  #: Callable[[answer], str | None] or None: the prompt uses dreads' labels
    labels: tuple[str, ...] = ()  #: the prompt's labels ((): any requested id may be one)
    images: tuple[str, ...] = ()  #: the sha256 of each image the read carries, in order

    @property
    def key(self) -> tuple[str, str]:
        return self.state, self.instructions

    @property
    def seed(self) -> tuple[Any, ...]:
        """What the question's hashes go by: its key, and its images when it has any."""
        return (*self.key, self.images) if self.images else self.key


def _unit(*parts: Any) -> float:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") + 0.5) / 2**64


def _normal(*parts: Any) -> float:
    return _STD.inv_cdf(_unit(*parts))


class Scorer:
    """Turns a validated read into logprob rows."""

    def __init__(self, options: ScoreOptions, *, vocab_size: int, piece: Any,
                 key: AnswerKey | None = None) -> None:
        self.options = options
        self.vocab_size = vocab_size
        self.piece = piece  #: id -> decoded text
        self.key = key

    def rows(self, canvas: Sequence[int], n_rows: int, logprob_ids: Sequence[int],
             slots: Mapping[int, SlotQuestion | None], fault: str | None) -> list[Row]:
        """One row per position < n_rows. ``slots``: position -> its question, or None."""
        out: list[Row] = []
        dropped = False
        joint = len({s.key for s in slots.values() if s is not None}) > 1
        for position in range(n_rows):
            if position in slots:
                row = self._slot_row(canvas, position, logprob_ids, slots[position], fault,
                                     joint=joint)
                if fault == "malformed" and not dropped and len(logprob_ids) > 1:
                    row, dropped = _drop_label(row, logprob_ids), True
            else:
                row = _template_row(canvas[position], position, logprob_ids)
            out.append(row)
        return out

    def _slot_row(self, canvas: Sequence[int], position: int, ids: Sequence[int],
                  slot: SlotQuestion | None, fault: str | None, *, joint: bool = False) -> Row:
        if not ids:
            return Row(canvas[position], -0.05, {})
        own = self._own_ids(ids, slot)
        after_colon = position > 0 and self.piece(canvas[position - 1]).endswith(":")
        truth = self._true_id(own, slot, spaced=after_colon)
        question = slot.seed if slot is not None else None
        logits = self._logits(canvas[position], position, own, question, truth, joint=joint)
        top = max(logits, key=logits.__getitem__)
        log_z = math.log(sum(math.exp(v) for v in logits.values()))
        rest = _floor_logprobs(ids, position)
        if fault == "low_mass":
            mass = 0.03 + 0.12 * _unit(self.options.seed, "mass", canvas[position], position)
            logprobs = {i: math.log(mass) + v - log_z for i, v in logits.items()}
            other = self._non_label(ids, canvas[position])
            return Row(other, math.log(0.6), {**rest, **logprobs})
        mass = 0.90 + 0.09 * _unit(self.options.seed, "mass", question)
        logprobs = {i: math.log(mass) + v - log_z for i, v in logits.items()}
        return Row(top, logprobs[top], {**rest, **logprobs})

    def _own_ids(self, ids: Sequence[int], slot: SlotQuestion | None) -> list[int]:
        """The requested ids that are this slot's labels (a joint canvas asks for every
        question's); all of them when the prompt's labels are unknown."""
        if slot is None or not slot.labels:
            return list(ids)
        own = [i for i in ids if self.piece(i).strip() in slot.labels]
        return own or list(ids)

    def _logits(self, noise_id: int, position: int, ids: Sequence[int],
                question: tuple[Any, ...] | None, truth: int | None, *,
                joint: bool = False) -> dict[int, float]:
        opts = self.options
        interference = opts.joint_interference if joint else 0.0
        lead = 1.0 - interference
        logits: dict[int, float] = {}
        for token_id in ids:
            if truth is None:
                base = 1.5 * _normal(opts.seed, "base", question, token_id)
            elif token_id == truth:
                base = lead * (opts.separation + _normal(opts.seed, "latent", question))
            else:
                base = 0.3 * _normal(opts.seed, "other", question, token_id)
            base += opts.noise * _normal(opts.seed, "noise", noise_id, position, token_id)
            logits[token_id] = base * (1.0 + opts.miscalibration)
        first = [i for i in ids if self.piece(i).strip().lower() in _FIRST_LABELS]
        if opts.miscalibration and first:
            logits[first[0]] -= opts.miscalibration
        for token_id in first if interference else ():  # spaced and bare alike
            logits[token_id] -= JOINT_PUSH * interference
        return logits

    def _true_id(self, ids: Sequence[int], slot: SlotQuestion | None, *,
                 spaced: bool) -> int | None:
        """The id of the key's label at this slot: after "q0:" the label's spaced token
        ("▁yes"), else its bare one ("yes"), whichever the request asks for."""
        if self.key is None or slot is None:
            return None
        label = self.key.label(*slot.key, slot.images)
        if label is not None and slot.key_label is not None:
            label = slot.key_label(label)
        if not isinstance(label, str):  # no answer, or one the prompt's question does not offer
            return None
        matches = [i for i in ids if self.piece(i).strip() == label]
        preferred = [i for i in matches if self.piece(i).startswith(" ") == spaced]
        found = preferred or matches
        return found[0] if found else None

    def _non_label(self, ids: Sequence[int], noise_id: int) -> int:
        candidate = int(_unit(self.options.seed, "other-argmax", noise_id) * self.vocab_size)
        while candidate in ids:
            candidate = (candidate + 1) % self.vocab_size
        return candidate


def _floor_logprobs(ids: Sequence[int], position: int) -> dict[int, float]:
    """Small, fixed logprobs for ids the model does not want at ``position``."""
    return {i: -12.0 - ((i * 2654435761 + position) % 997) / 250.0 for i in ids}


def _template_row(token_id: int, position: int, ids: Sequence[int]) -> Row:
    logprobs = _floor_logprobs(ids, position)
    if token_id in logprobs:
        logprobs[token_id] = -0.01
    return Row(token_id, -0.01, logprobs)


def _drop_label(row: Row, ids: Sequence[int]) -> Row:
    victim = next((i for i in ids if i != row.argmax_id), ids[0])
    return Row(row.argmax_id, row.argmax_logprob,
               {i: v for i, v in row.logprobs.items() if i != victim})
