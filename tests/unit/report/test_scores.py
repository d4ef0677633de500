"""Report metrics against scikit-learn and hand computations."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, confusion_matrix, log_loss, roc_auc_score

from app.report import scores as m

# 4 positives, 6 negatives, hand-checkable.
Y = np.array([1, 0, 1, 0, 0, 1, 0, 0, 1, 0])
S = np.array([0.95, 0.80, 0.60, 0.40, 0.35, 0.25, 0.20, 0.10, 0.05, 0.01])


def test_auc_matches_sklearn_and_handles_one_class() -> None:
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 500)
    s = np.clip(rng.normal(0.3 + 0.3 * y, 0.2), 0, 1)
    assert m.auc(y, s) == pytest.approx(roc_auc_score(y, s))
    assert m.auc(np.ones(5), np.linspace(0, 1, 5)) is None
    assert m.auc([], []) is None


def test_recall_at_threshold_is_strictly_above() -> None:
    assert m.recall_at(Y, S, 0.30) == (2, 0.5)  # 0.95 and 0.60
    assert m.recall_at(Y, S, 0.60) == (1, 0.25)
    assert m.recall_at(np.zeros(3), np.ones(3), 0.3) == (0, None)


def test_rank_percentiles_and_top_share_by_hand() -> None:
    # Positives sit at ranks 1, 3, 6, 9 of 10.
    assert m.positive_rank_percentiles(Y, S).tolist() == [10.0, 30.0, 60.0, 90.0]
    assert m.rank_summary(Y, S) == (45.0, 90.0)
    assert m.top_share(Y, S, 0.30) == (2, 0.5)  # ranks 1 and 3 within the top 3
    assert m.top_share(Y, S, 0.05) == (0, 0.0)  # top 5% of 10 is half a rank
    assert m.top_share(Y, S, 0.10) == (1, 0.25)


def test_ties_share_the_average_rank() -> None:
    y = np.array([1, 0, 0, 0])
    s = np.array([0.5, 0.5, 0.5, 0.5])
    assert m.positive_rank_percentiles(y, s).tolist() == [62.5]  # rank 2.5 of 4


def test_false_positives_per_thousand_and_per_hundred_states() -> None:
    count, per_1000, per_states = m.false_positives(Y, S, 0.70, n_states=4)
    assert (count, per_1000, per_states) == (1, pytest.approx(1000 / 6), 25.0)
    assert m.false_positives(np.ones(2), np.ones(2), 0.7, 0) == (0, None, None)


def test_referral_band_is_inclusive() -> None:
    assert m.referral_band(S, 0.30, 0.70) == 3  # 0.60, 0.40, 0.35
    assert m.referral_band([0.3, 0.7, 0.71, 0.29], 0.3, 0.7) == 2


def test_brier_ece_and_reliability() -> None:
    assert m.brier(Y, S) == pytest.approx(brier_score_loss(Y, S))
    perfect = np.array([0.0, 0.0, 1.0, 1.0])
    assert m.ece([0, 0, 1, 1], perfect) == 0.0
    # All scores 0.9, half positive: ECE = |0.9 - 0.5|.
    assert m.ece([1, 0, 1, 0], [0.9] * 4) == pytest.approx(0.4)
    bins = m.reliability_bins([1, 0, 1], [0.05, 0.55, 1.0], n_bins=10)
    assert [b.count for b in bins] == [1, 0, 0, 0, 0, 1, 0, 0, 0, 1]
    assert bins[-1].observed == 1.0 and bins[5].mean_score == pytest.approx(0.55)


def test_log_loss_accuracy_confusion_mae() -> None:
    truth = ["A", "B", "C", "A"]
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.5, 0.3, 0.2], [0.4, 0.4, 0.2]])
    p_true = [probs[i, "ABC".index(t)] for i, t in enumerate(truth)]
    assert m.log_loss_true(p_true) == pytest.approx(log_loss(truth, probs, labels=["A", "B", "C"]))
    predicted = ["A", "B", "A", "A"]
    assert m.accuracy(truth, predicted) == 0.75
    assert m.confusion(truth, predicted, ["A", "B", "C"]) == confusion_matrix(
        truth, predicted, labels=["A", "B", "C"]).tolist()
    assert m.mae([0, 1, 2], [0.5, 1.0, 1.0]) == pytest.approx(0.5)
    assert m.accuracy([], []) is None and m.log_loss_true([]) is None


def test_outlier_cell_flagged_like_the_field_report() -> None:
    # 56 unanswered of 1,653 in one cell, 0 in the eleven others (~60,000 questions in all).
    counts = [56] + [0] * 11
    totals = [1653] + [5333] * 11
    flags = m.flag_outlier_rates(counts, totals)
    assert flags[0][0] is True
    assert not any(flag for flag, _ in flags[1:])


def test_even_low_or_single_rates_are_not_flagged() -> None:
    flags = m.flag_outlier_rates([10, 12, 9, 11], [1000, 1000, 1000, 1000])
    assert not any(flag for flag, _ in flags)
    # One stray failure where the others have none is not an outlier.
    assert not any(flag for flag, _ in m.flag_outlier_rates([1, 0, 0, 0], [1600] * 4))
    # A cell doing better than the rest is not flagged, the one doing worse is.
    flags = m.flag_outlier_rates([0, 25], [300, 300])
    assert [flag for flag, _ in flags] == [False, True]
    assert m.flag_outlier_rates([0, 0], [10, 10]) == [(False, None), (False, None)]
    assert m.flag_outlier_rates([5], [10]) == [(False, None)]
