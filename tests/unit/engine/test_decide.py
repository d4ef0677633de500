"""fold_row, the stop rules and aggregation, against hand-computed values."""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.engine import (
    PolicyName,
    ReadSettings,
    SlotRead,
    SlotRow,
    StopReason,
    aggregate,
    fold_row,
    parse_question,
    stop_reason,
    trivial_answer,
)
from app.errors import MalformedResponse

YES, NO = 11, 12


def test_fold_row_hand_computed() -> None:
    row = SlotRow(logprobs={YES: math.log(0.6), NO: math.log(0.2), 5: math.log(0.15)},
                  argmax_id=YES, argmax_logprob=math.log(0.6))
    read = fold_row(row, [YES, NO], question_index=2, draw=1)
    assert read.probs == pytest.approx((0.75, 0.25))
    assert read.label_mass == pytest.approx(0.8)
    assert read.entropy == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert read.argmax_is_label and (read.question_index, read.draw) == (2, 1)
    assert read.label_logprobs == pytest.approx((math.log(0.6), math.log(0.2)))


def test_fold_row_argmax_not_a_label_and_low_mass() -> None:
    row = SlotRow(logprobs={YES: -5.0, NO: -6.0, 99: -0.01}, argmax_id=99, argmax_logprob=-0.01)
    read = fold_row(row, [YES, NO], question_index=0, draw=0)
    assert not read.argmax_is_label
    assert read.label_mass == pytest.approx(math.exp(-5) + math.exp(-6))
    assert read.probs[0] == pytest.approx(1 / (1 + math.exp(-1)))


def test_fold_row_survives_very_negative_logprobs() -> None:
    row = SlotRow(logprobs={YES: -2000.0, NO: -2001.0}, argmax_id=1, argmax_logprob=0.0)
    assert sum(fold_row(row, [YES, NO], question_index=0, draw=0).probs) == pytest.approx(1.0)


def test_missing_label_is_malformed_never_floored() -> None:
    row = SlotRow(logprobs={YES: -0.1}, argmax_id=YES, argmax_logprob=-0.1)
    with pytest.raises(MalformedResponse, match=r"label token id\(s\) \[12\] missing"):
        fold_row(row, [YES, NO], question_index=0, draw=3)


def sr(*probs: float, draw: int = 0, mass: float = 1.0, is_label: bool = True) -> SlotRead:
    h = -sum(p * math.log(p) for p in probs if p > 0)
    return SlotRead(question_index=0, draw=draw, probs=probs,
                    label_logprobs=tuple(math.log(p) if p > 0 else -99.0 for p in probs),
                    label_mass=mass, entropy=h, argmax_id=YES, argmax_is_label=is_label)


AGREE = ReadSettings()
ENTROPY = ReadSettings(policy=PolicyName.ENTROPY)


@pytest.mark.parametrize(("settings", "draws", "expected"), [
    # agree: near-certain first draw stops at 1 (entropy of (0.99, 0.01) = 0.056)
    (AGREE, [[sr(0.99, 0.01)]], StopReason.NEAR_CERTAIN),
    (AGREE, [[sr(0.99, 0.01), sr(0.7, 0.3)]], None),  # every question must be near-certain
    (AGREE, [[sr(0.7, 0.3)]], None),
    (AGREE, [[sr(0.7, 0.3)], [sr(0.65, 0.35)]], StopReason.AGREED),
    (AGREE, [[sr(0.7, 0.3)], [sr(0.6, 0.4)]], StopReason.AGREED),  # exactly the threshold
    (AGREE, [[sr(0.7, 0.3)], [sr(0.5, 0.5)]], None),
    (AGREE, [[sr(0.7, 0.3)], [sr(0.5, 0.5)], [sr(0.6, 0.4)]], None),
    (AGREE, [[sr(0.7, 0.3)], [sr(0.5, 0.5)], [sr(0.6, 0.4)], [sr(0.9, 0.1)]],
     StopReason.MAX_DRAWS),
    (AGREE, [[sr(0.7, 0.3), sr(0.5, 0.5)], [sr(0.7, 0.3), sr(0.9, 0.1)]], None),
    (ReadSettings(max_draws=1), [[sr(0.5, 0.5)]], StopReason.MAX_DRAWS),
    (ReadSettings(threshold=0.3), [[sr(0.5, 0.5)], [sr(0.1, 0.9)]], None),
    # three labels: every label must agree
    (AGREE, [[sr(0.5, 0.3, 0.2)], [sr(0.5, 0.15, 0.35)]], None),
    # entropy (reference auto rule)
    (ENTROPY, [[sr(0.99, 0.01)]], StopReason.LOW_ENTROPY),
    (ENTROPY, [[sr(0.7, 0.3)]], None),
    (ENTROPY, [[sr(0.7, 0.3)], [sr(0.7, 0.3)]], None),  # no agreement stop
    (ENTROPY, [[sr(0.7, 0.3)]] * 4, StopReason.MAX_DRAWS),
    # fixed
    (ReadSettings(policy=PolicyName.FIXED, fixed_draws=3), [[sr(0.99, 0.01)]] * 2, None),
    (ReadSettings(policy=PolicyName.FIXED, fixed_draws=3), [[sr(0.99, 0.01)]] * 3,
     StopReason.FIXED),
    (ReadSettings(policy=PolicyName.FIXED, fixed_draws=1), [[sr(0.5, 0.5)]], StopReason.FIXED),
    (AGREE, [], None),
])
def test_stop_rules(settings: ReadSettings, draws: list[list[SlotRead]],
                    expected: StopReason | None) -> None:
    assert stop_reason(settings, draws) == expected


NOUL = parse_question("conflict", {"type": "noul", "instructions": "?"})
SCORE = parse_question("sev", {"type": "score", "instructions": "?",
                               "criteria": ["none", "minor", "major"]})
CHOICE = parse_question("who", {"type": "choice", "instructions": "?",
                                "criteria": {"buyer": None, "seller": None}})


def test_aggregate_noul_hand_computed() -> None:
    reads = [sr(0.8, 0.2, draw=0, mass=0.9), sr(0.6, 0.4, draw=1, mass=0.5),
             sr(0.4, 0.6, draw=2, mass=0.7, is_label=False)]
    a = aggregate(NOUL, reads, StopReason.MAX_DRAWS)
    assert (a.label, a.option, a.draws, a.stop_reason) == ("yes", "yes", 3, StopReason.MAX_DRAWS)
    assert a.probs == pytest.approx({"yes": 0.6, "no": 0.4})
    assert a.p_yes == pytest.approx(0.6) and a.top_prob == pytest.approx(0.6)
    # stderr = sqrt(((0.2)^2 + 0 + (0.2)^2) / 2 / 3) = sqrt(0.04/3)
    assert a.stderr == pytest.approx(math.sqrt(0.04 / 3))
    assert a.agreement == pytest.approx(2 / 3)
    h = -(0.6 * math.log(0.6) + 0.4 * math.log(0.4))
    assert a.entropy == pytest.approx(h)
    assert a.confidence == pytest.approx(1 - h / math.log(2))
    assert a.label_mass == pytest.approx(0.7) and a.min_label_mass == pytest.approx(0.5)
    assert a.argmax_is_label is False
    assert a.expected_level is None and a.legend is None


def test_aggregate_single_draw_has_no_stderr_or_agreement() -> None:
    a = aggregate(NOUL, [sr(0.1, 0.9)], StopReason.NEAR_CERTAIN)
    assert (a.label, a.stderr, a.agreement, a.draws) == ("no", None, None, 1)
    assert a.p_yes == pytest.approx(0.1) and a.argmax_is_label


def test_aggregate_score_expected_level_and_legend() -> None:
    reads = [sr(0.2, 0.3, 0.5), sr(0.0 + 0.1, 0.5, 0.4)]
    a = aggregate(SCORE, reads, StopReason.AGREED)
    assert a.probs == pytest.approx({"1": 0.15, "2": 0.4, "3": 0.45})
    assert (a.label, a.option) == ("3", "major")
    assert a.expected_level == pytest.approx(0.4 + 2 * 0.45)
    assert a.legend == {"0": "none", "1": "minor", "2": "major"}
    assert a.p_yes is None
    assert a.agreement == pytest.approx(0.5)


def test_aggregate_choice_maps_back_to_option_and_breaks_ties_by_order() -> None:
    a = aggregate(CHOICE, [sr(0.5, 0.5)], StopReason.FIXED)
    assert (a.label, a.option, a.confidence) == ("A", "buyer", pytest.approx(0.0))


@pytest.mark.parametrize(("spec", "level"), [
    ({"type": "choice", "instructions": "?", "criteria": {"only": "x"}}, None),
    ({"type": "score", "instructions": "?", "criteria": ["single"]}, 0.0),
])
def test_trivial_answer(spec: dict[str, Any], level: float | None) -> None:
    q = parse_question("t", spec)
    a = trivial_answer(q)
    assert (a.label, a.top_prob, a.draws, a.stop_reason) == ("1" if q.type ==
                                                             "score" else "A",
                                                             1.0, 0, StopReason.TRIVIAL)
    assert a.probs == {a.label: 1.0} and a.confidence == 1.0 and a.expected_level == level


def test_aggregate_without_reads_is_a_bug() -> None:
    with pytest.raises(ValueError, match="no draws"):
        aggregate(NOUL, [], StopReason.FIXED)
