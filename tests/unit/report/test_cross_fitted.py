"""Without --calibration a report still shows what calibration would give: a cross-fitted map,
each answer through a map that never saw it."""

from __future__ import annotations

import numpy as np

from app.report import scores as m
from app.report.calibration import cross_fitted


def _overconfident(n: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = rng.uniform(0.05, 0.6, n)
    y = (rng.uniform(size=n) < truth).astype(np.int64)
    s = np.clip(truth * 1.6, 0.0, 1.0)  # says 0.8 where 0.5 is true
    return y, s


def test_cross_fitting_lowers_the_ece_of_a_miscalibrated_model() -> None:
    y, s = _overconfident(4000)
    fitted = cross_fitted(y, s)
    assert fitted is not None
    raw, calibrated = m.ece(y, s), m.ece(y, fitted)
    assert raw is not None and calibrated is not None
    assert raw > 0.1 and calibrated < raw / 3


def test_each_answer_is_mapped_by_a_fit_that_never_saw_it() -> None:
    # Labels that are pure noise: an in-sample isotonic fit would follow them and look
    # calibrated; out of fold, the map cannot know an answer's own label.
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 600)
    s = rng.uniform(size=600)
    fitted = cross_fitted(y, s)
    assert fitted is not None
    in_sample_gain = np.mean(np.abs(fitted - y))
    assert in_sample_gain > 0.4  # no better than guessing 0.5


def test_too_few_labels_of_a_class_give_none() -> None:
    assert cross_fitted([1, 0, 0, 0, 0, 0, 0, 0], [0.9] + [0.1] * 7) is None
