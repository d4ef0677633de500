"""``ReadSettings`` <-> dict, and its hash (recorded on a run)."""

from __future__ import annotations

from typing import Any

from app.engine.types import ReadSettings

__all__ = ["settings_from_dict", "settings_hash", "settings_to_dict"]


def settings_to_dict(settings: ReadSettings) -> dict[str, Any]:
    """JSON-able dict of the settings (enums as their values)."""
    raise NotImplementedError


def settings_from_dict(data: dict[str, Any]) -> ReadSettings:
    """Inverse of ``settings_to_dict``. Raises ConfigError on unknown keys or bad values."""
    raise NotImplementedError


def settings_hash(settings: ReadSettings) -> str:
    """sha256 hex of the canonical JSON of the settings."""
    raise NotImplementedError
