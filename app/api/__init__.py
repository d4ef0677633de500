"""The HTTP API of ``dreads serve``: runs over HTTP and a Jev-compatible ``/v1/systemone``."""

from __future__ import annotations

from app.connect.plugins import load_plugins

load_plugins()  # installed kinds and sources, before the request models list the kinds

from app.api.app import create_app, create_app_from_env  # noqa: E402
from app.api.config import ServeConfig  # noqa: E402

__all__ = ["ServeConfig", "create_app", "create_app_from_env"]
