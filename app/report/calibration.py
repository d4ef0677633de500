"""Monotone calibration maps for P(yes): fitted with scikit-learn, saved as JSON, applied in numpy.

The field report found that ranking survives where absolute scores do not: a run can rank
superbly and still be miscalibrated. ``dreads calibrate`` fits a monotone map from a
labelled run (isotonic by default, or Platt scaling), globally or per question id, and
``dreads report --calibration`` applies it to another run.

The applied map is ``(1 - EPSILON) * f(p) + EPSILON * p``: isotonic regression is flat on
stretches, and the small raw term keeps it strictly increasing so ranking figures (AUC, ranks,
top share) are exactly those of the raw scores, while the calibration moves by < 1e-6. That
holds for one global map; per-question maps keep each question's ranking but may reorder
answers of different questions, so pooled ranking figures can change under them.

``calib.json``::

    {"format": "dreads.calibration/1", "method": "isotonic", "scope": "per_question",
     "epsilon": 1e-06, "global": {"x": [...], "y": [...]},
     "questions": {"conflict": {"x": [...], "y": [...]}}, "source": {"run": "...", "n": 812}}

Platt maps are ``{"a": slope, "b": intercept}`` on the logit: ``sigmoid(a * logit(p) + b)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit, logit
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from app.errors import InputError
from app.report.methods import CalibrationMethod

__all__ = [
    "CROSS_FOLDS",
    "EPSILON",
    "FORMAT",
    "Calibration",
    "CalibrationMethod",
    "cross_fitted",
    "fit_calibration",
    "fit_map",
    "load_calibration",
]

FORMAT = "dreads.calibration/1"
EPSILON = 1e-6
_CLIP = 1e-6  #: logit domain for Platt scaling
MIN_PER_QUESTION = 20  #: fewer labelled answers (or one class only): the global map applies
CROSS_FOLDS = 5  #: folds of the cross-fitted calibration a report shows without --calibration

FloatArray = NDArray[np.float64]


def fit_map(y: ArrayLike, s: ArrayLike, method: CalibrationMethod) -> dict[str, Any]:
    """Fit one monotone map of scores ``s`` to outcomes ``y``; JSON-ready parameters."""
    ya = np.asarray(y, dtype=np.float64)
    sa = np.asarray(s, dtype=np.float64)
    if method is CalibrationMethod.ISOTONIC:
        iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
        iso.fit(sa, ya)
        return {"x": [float(v) for v in iso.X_thresholds_],
                "y": [float(v) for v in iso.y_thresholds_]}
    model = LogisticRegression(C=1e6, max_iter=1000)
    model.fit(_logit(sa).reshape(-1, 1), ya.astype(np.int64))
    return {"a": float(model.coef_[0][0]), "b": float(model.intercept_[0])}


def cross_fitted(y: ArrayLike, s: ArrayLike, *, folds: int = CROSS_FOLDS,
                 seed: int = 0) -> FloatArray | None:
    """What a calibration of this run would give, measured honestly: each score through an
    isotonic map fitted on the other ``folds - 1`` stratified folds, never on itself. None
    when either class has fewer than ``folds`` answers."""
    ya = np.asarray(y, dtype=np.int64)
    sa = np.asarray(s, dtype=np.float64)
    positives = int(ya.sum())
    if min(positives, ya.size - positives) < folds:
        return None
    out = np.empty_like(sa)
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(sa, ya):
        params = fit_map(ya[train], sa[train], CalibrationMethod.ISOTONIC)
        out[test] = (1.0 - EPSILON) * _apply_map(params, sa[test]) + EPSILON * sa[test]
    return out


def _logit(s: FloatArray) -> FloatArray:
    return np.asarray(logit(np.clip(s, _CLIP, 1.0 - _CLIP)), dtype=np.float64)


def _apply_map(params: Mapping[str, Any], s: FloatArray) -> FloatArray:
    if "x" in params:
        return np.interp(s, np.asarray(params["x"]), np.asarray(params["y"]))
    return np.asarray(expit(params["a"] * _logit(s) + params["b"]), dtype=np.float64)


@dataclass(frozen=True)
class Calibration:
    """A fitted calibration: a global map and optional per-question maps."""

    method: CalibrationMethod
    global_map: Mapping[str, Any]
    questions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    source: Mapping[str, Any] = field(default_factory=dict)
    epsilon: float = EPSILON

    @property
    def scope(self) -> str:
        return "per_question" if self.questions else "global"

    def apply(self, question_ids: Sequence[str], s: ArrayLike) -> FloatArray:
        """Calibrated P(yes) per score; a question without its own map uses the global one."""
        sa = np.asarray(s, dtype=np.float64)
        out = np.empty_like(sa)
        qids = np.asarray(list(question_ids), dtype=object)
        for qid in set(qids.tolist()):
            mask = qids == qid
            params = self.questions.get(qid, self.global_map)
            out[mask] = _apply_map(params, sa[mask])
        return (1.0 - self.epsilon) * out + self.epsilon * sa

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "method": self.method.value, "scope": self.scope,
            "epsilon": self.epsilon, "global": dict(self.global_map),
            "questions": {q: dict(v) for q, v in sorted(self.questions.items())},
            "source": dict(self.source),
        }

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")


def fit_calibration(
    y: ArrayLike,
    s: ArrayLike,
    question_ids: Sequence[str],
    *,
    method: CalibrationMethod = CalibrationMethod.ISOTONIC,
    per_question: bool = False,
    source: Mapping[str, Any] | None = None,
) -> Calibration:
    """Fit a global map and, with ``per_question``, one map per question id that has
    at least ``MIN_PER_QUESTION`` labelled answers of both outcomes.

    Raises:
        InputError: no labelled answers of both outcomes, or a Platt slope <= 0.
    """
    ya = np.asarray(y, dtype=np.int64)
    sa = np.asarray(s, dtype=np.float64)
    _require_both(ya, "the run")
    global_map = _checked(fit_map(ya, sa, method), "all questions")
    questions: dict[str, dict[str, Any]] = {}
    qids = np.asarray(list(question_ids), dtype=object)
    for qid in sorted(set(qids.tolist())) if per_question else []:
        mask = qids == qid
        if mask.sum() >= MIN_PER_QUESTION and 0 < ya[mask].sum() < mask.sum():
            questions[qid] = _checked(fit_map(ya[mask], sa[mask], method), f"question {qid!r}")
    meta = {"n": int(ya.size), "positives": int(ya.sum()), **(source or {})}
    return Calibration(method=method, global_map=global_map, questions=questions, source=meta)


def _require_both(y: NDArray[np.int64], what: str) -> None:
    if not y.size or int(y.sum()) in (0, y.size):
        raise InputError(
            f"{what} has {int(y.sum())} yes and {int(y.size - y.sum())} no labelled answers; "
            "calibration needs answered yes/no questions with `expected` labels of both "
            "outcomes (add \"expected\" to the job lines and run them)"
        )


def _checked(params: dict[str, Any], what: str) -> dict[str, Any]:
    if "a" in params and params["a"] <= 0:
        raise InputError(
            f"Platt scaling for {what} fitted a slope {params['a']:.3g} <= 0: the scores do not "
            "rank the outcomes, so a monotone map cannot calibrate them; check the expected "
            "labels, or use --method isotonic"
        )
    return params


def load_calibration(path: Path) -> Calibration:
    """Read ``calib.json``; InputError saying what is wrong with the file otherwise."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(
            f"calibration file {path} not found; create it with "
            f"`dreads calibrate RUN -o {path}`"
        ) from exc
    except (OSError, ValueError) as exc:
        raise InputError(f"calibration file {path} is not readable JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(
            f"{path} is not a dreads calibration file (expected \"format\": \"{FORMAT}\"); "
            "create one with `dreads calibrate RUN -o calib.json`"
        )
    try:
        return Calibration(
            method=CalibrationMethod(doc["method"]), global_map=doc["global"],
            questions=doc.get("questions") or {}, source=doc.get("source") or {},
            epsilon=float(doc.get("epsilon", EPSILON)),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise InputError(f"calibration file {path} is incomplete or invalid: {exc}") from exc
