"""The tiny model the packed-path tests read with."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="module")
def model() -> Any:
    """3 layers (2 sliding, window 16, and 1 full), float32; one per test module."""
    pytest.importorskip("torch")
    from app.inprocess import ReadModel, build_tiny_model

    return ReadModel(build_tiny_model(512, layers=3, seed=3))
