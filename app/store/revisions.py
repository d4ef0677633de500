"""The schema revision the code needs, read from the migration files (no Alembic, no
SQLAlchemy): every command checks it before it reads the store."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

__all__ = ["MIGRATIONS", "files_head"]

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
_REVISION = re.compile(r"^(down_revision|revision)\s*(?::[^=]*)?=\s*['\"]?([\w-]+|None)['\"]?",
                       re.MULTILINE)


@lru_cache(maxsize=1)
def files_head() -> str | None:
    """The single head of the migration files, or None when they do not show exactly one."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        found = dict((k, v) for k, v in _REVISION.findall(path.read_text(encoding="utf-8")))
        if "revision" not in found:
            return None
        revisions.add(found["revision"])
        parents.add(found.get("down_revision", "None"))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None
