"""The CLI starts fast because it imports the heavy parts only in the commands that use them.

Each case runs the real entry point in a fresh interpreter and lists what it imported; the
start-up times themselves are measured by ``bench/startup.py``, not here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: never imported to parse a command line, show help, or read the store
HEAVY = ("torch", "transformers", "sklearn", "scipy", "matplotlib", "numpy", "celery", "kombu",
         "redis", "fastapi", "starlette", "uvicorn", "app.api", "aiohttp", "httpx", "alembic",
         "tokenizers", "pydantic", "app.sim.app", "app.sim.server", "app.report.calibration",
         "app.report.scores", "app.runs.embedded", "app.runs.submit")
#: and this only where the command reads the store
STORE = ("sqlalchemy", "psycopg", "app.store.models")

_PROBE = """
import json, sys
from app.cli import main
sys.argv = ["dreads", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _imported(args: list[str], cwd: Path) -> set[str]:
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(args)], cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    modules = json.loads(done.stderr.strip().splitlines()[-1])
    return {m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY + STORE)}


def test_importing_the_cli_loads_nothing_heavy(tmp_path: Path) -> None:
    code = "import sys, app.cli; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    loaded = set(done.stdout.split())
    assert not {h for h in HEAVY + STORE if h in loaded}


@pytest.mark.parametrize("args", [
    ["--help"], ["run", "--help"], ["submit", "--help"], ["report", "--help"],
    ["serve", "--help"], ["worker", "--help"], ["sim", "--help"], ["db", "--help"],
    ["status", "--help"],
])
def test_help_loads_nothing_heavy(args: list[str], tmp_path: Path) -> None:
    assert _imported(args, tmp_path) == set()


@pytest.mark.parametrize("args", [["status", "r"], ["export", "r"], ["cancel", "r"]])
def test_store_commands_load_the_store_and_nothing_else(args: list[str], tmp_path: Path) -> None:
    from app.store.migrate import upgrade

    upgrade(f"sqlite:///{tmp_path / 'dreads.db'}")
    loaded = _imported(args, tmp_path)
    assert "sqlalchemy" in loaded
    assert not {m for m in loaded if not m.startswith(STORE)}


@pytest.mark.parametrize("args", [["runs"], ["runs", "--json"]])
def test_reading_commands_answer_without_sqlalchemy(args: list[str], tmp_path: Path) -> None:
    """``runs`` (and ``status`` of a run that is there: tests/integration/store/
    test_plain_views.py) read through the driver alone (``app.store.plain``)."""
    from app.store.migrate import upgrade

    upgrade(f"sqlite:///{tmp_path / 'dreads.db'}")
    assert _imported(args, tmp_path) == set()
