"""The HTTP API of ``dreads serve``: runs over HTTP and a Jev-compatible ``/v1/systemone``."""

from __future__ import annotations

from app.api.app import create_app, create_app_from_env
from app.api.config import ServeConfig

__all__ = ["ServeConfig", "create_app", "create_app_from_env"]
