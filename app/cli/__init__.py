"""``dreads`` command line. One module per command group; each registers on ``_app.app``."""

from __future__ import annotations

from app.cli._app import app

# Command modules register themselves on import.
from app.cli import sim as _sim  # noqa: E402,F401  isort: skip

__all__ = ["app", "main"]


def main() -> None:
    app()
