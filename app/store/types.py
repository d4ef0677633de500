"""The store's types for the layers above it, which never import SQLAlchemy themselves."""

from __future__ import annotations

from typing import TypeAlias

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["Engine", "Session", "SessionFactory"]

#: What opens sessions on one database (``make_sessionmaker``); passed down, never global.
SessionFactory: TypeAlias = sessionmaker[Session]
