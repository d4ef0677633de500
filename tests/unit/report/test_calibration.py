"""Calibration maps: fitted as scikit-learn does, ranking kept, ECE reduced, JSON round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import roc_auc_score

from app.errors import InputError
from app.report import scores as m
from app.report.calibration import (
    EPSILON,
    CalibrationMethod,
    fit_calibration,
    fit_map,
    load_calibration,
)


def _miscalibrated(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores that rank well but are squashed towards 0 (true P(yes) = sqrt(score))."""
    rng = np.random.default_rng(seed)
    truth = rng.uniform(0, 1, n)
    y = (rng.uniform(0, 1, n) < truth).astype(int)
    return y, truth**2


def test_isotonic_map_equals_sklearn_predictions() -> None:
    y, s = _miscalibrated(400, 1)
    params = fit_map(y, s, CalibrationMethod.ISOTONIC)
    iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(s, y)
    probe = np.linspace(-0.1, 1.1, 57)
    assert np.interp(probe, params["x"], params["y"]) == pytest.approx(iso.predict(probe))


@pytest.mark.parametrize("method", list(CalibrationMethod))
def test_calibration_keeps_auc_and_lowers_ece(method: CalibrationMethod) -> None:
    y, s = _miscalibrated(2000, 2)
    cal = fit_calibration(y, s, ["q"] * len(y), method=method, per_question=False)
    y2, s2 = _miscalibrated(2000, 3)  # applied to another run
    c2 = cal.apply(["q"] * len(y2), s2)
    assert roc_auc_score(y2, c2) == roc_auc_score(y2, s2)
    assert m.rank_summary(y2, c2) == m.rank_summary(y2, s2)
    assert m.top_share(y2, c2, 0.05) == m.top_share(y2, s2, 0.05)
    ece_raw, ece_cal = m.ece(y2, s2), m.ece(y2, c2)
    assert ece_raw is not None and ece_cal is not None
    assert ece_cal < ece_raw / 2
    assert np.all((c2 >= 0) & (c2 <= 1))


def test_isotonic_application_is_strictly_increasing() -> None:
    y, s = _miscalibrated(300, 4)
    cal = fit_calibration(y, s, ["q"] * len(y), per_question=False)
    grid = np.linspace(0, 1, 1001)
    assert np.all(np.diff(cal.apply(["q"] * grid.size, grid)) > 0)
    raw = np.interp(grid, cal.global_map["x"], cal.global_map["y"])
    assert np.max(np.abs(cal.apply(["q"] * grid.size, grid) - raw)) <= EPSILON


def test_per_question_maps_and_global_fallback(tmp_path: Path) -> None:
    y1, s1 = _miscalibrated(300, 5)
    y2 = 1 - y1  # the second question's scores are meaningless the other way round
    ids = ["a"] * 300 + ["b"] * 300 + ["rare"] * 5
    y = np.concatenate([y1, y2, [1, 0, 1, 0, 1]])
    s = np.concatenate([s1, s1, [0.5] * 5])
    cal = fit_calibration(y, s, ids, per_question=True, source={"run": "r1"})
    assert set(cal.questions) == {"a", "b"}  # "rare" has too few answers: global map
    assert cal.scope == "per_question"
    path = tmp_path / "calib.json"
    cal.save(path)
    back = load_calibration(path)
    probe = np.array([0.1, 0.5, 0.9])
    for qid in ("a", "b", "rare", "unseen"):
        assert back.apply([qid] * 3, probe) == pytest.approx(cal.apply([qid] * 3, probe))
    assert back.source["run"] == "r1" and back.method is CalibrationMethod.ISOTONIC


def test_errors_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="both"):
        fit_calibration([1, 1, 1], [0.2, 0.5, 0.9], ["q"] * 3)
    with pytest.raises(InputError, match="slope"):
        fit_calibration([1, 1, 0, 0] * 10, [0.1, 0.2, 0.8, 0.9] * 10, ["q"] * 40,
                        method=CalibrationMethod.PLATT)
    with pytest.raises(InputError, match="dreads calibrate"):
        load_calibration(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "other"}')
    with pytest.raises(InputError, match="not a dreads calibration file"):
        load_calibration(bad)
