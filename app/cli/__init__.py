"""``dreads`` command line. One module per command group; each registers on ``_app.app``."""

from __future__ import annotations

from app.cli._app import app

__all__ = ["app", "main"]

# Command modules register their commands on import (one line per module).
# isort: off
from app.cli import sim  # noqa: F401
from app.cli import upstream  # noqa: F401
from app.cli import flower  # noqa: F401
from app.cli import worker  # noqa: F401
from app.cli import report  # noqa: F401
from app.cli import db, run, runs  # noqa: F401
from app.cli import engine  # noqa: F401
from app.cli import serve  # noqa: F401
# isort: on


def main() -> None:
    app()
