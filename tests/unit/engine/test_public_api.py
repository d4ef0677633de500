"""The engine's public surface: __all__ sorted and complete, and purity (no I/O modules)."""

from __future__ import annotations

import subprocess
import sys

import app.engine
from app.engine import types

FORBIDDEN = ("httpx", "aiohttp", "sqlalchemy", "celery", "redis", "fastapi", "torch",
             "transformers", "tokenizers", "app.config", "app.store", "app.upstream", "kombu",
             "psycopg", "requests", "socket")


def test_all_is_sorted_and_complete() -> None:
    names = app.engine.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), not n[:1].isupper(), n))
    assert set(types.__all__) <= set(names)
    for name in names:
        assert hasattr(app.engine, name), name


def test_importing_the_engine_pulls_in_no_io_module() -> None:
    code = ("import sys, app.engine; "
            "print('\\n'.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    loaded = [m for m in out for f in FORBIDDEN if m == f or m.startswith(f + ".")]
    assert loaded == []
