"""The architecture rules, checked with import-linter (contracts in ``pyproject.toml``).

- ``app.engine`` imports nothing of dreads but ``app.errors``, and no I/O library;
- nothing in ``app`` imports ``workers`` (publishers address tasks by name);
- only ``app.store`` (and ``migrations/``) imports ``sqlalchemy``;
- the layers run cli -> api | workers -> services -> store | upstream | broker -> engine.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import app

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


def test_the_import_contracts_are_kept() -> None:
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_every_module_of_app_is_under_the_contracts() -> None:
    """A new top-level module of app/ must be named in the module lists of the contracts."""
    modules = {f"app.{m.name}" for m in pkgutil.iter_modules(app.__path__)}
    contracts = _contracts()
    engine_forbids = set(contracts["engine-pure"]["forbidden_modules"])  # type: ignore[arg-type]
    sql_sources = set(contracts["sql-in-store"]["source_modules"])  # type: ignore[arg-type]
    assert modules - {"app.engine", "app.errors"} <= engine_forbids
    assert modules - {"app.store"} <= sql_sources
