"""Test configuration. Fixtures live in tests/fixtures/*.py and are listed here."""

from __future__ import annotations

import os

import pytest

# Each fixtures module is registered here (one line per module).
pytest_plugins: list[str] = [
    "tests.fixtures.services",
    "tests.fixtures.report_db",
    "tests.fixtures.tokenizer",
    "tests.fixtures.tiny_model",
    "tests.fixtures.sim",
    "tests.fixtures.runs_cli",
    "tests.fixtures.api",
    "tests.fixtures.browser",
    "tests.fixtures.images",
]


@pytest.fixture(autouse=True)
def _clean_dreads_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No DREADS_* setting from the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith("DREADS_"):
            monkeypatch.delenv(name, raising=False)
    from app.config import get_settings

    get_settings.cache_clear()
