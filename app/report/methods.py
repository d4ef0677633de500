"""The calibration methods by name (no scikit-learn: the CLI's options import this)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["CalibrationMethod"]


class CalibrationMethod(StrEnum):
    ISOTONIC = "isotonic"  #: non-parametric monotone step map (scikit-learn IsotonicRegression)
    PLATT = "platt"  #: logistic regression on logit(p)
