"""The architecture rules, checked with import-linter (contracts in ``pyproject.toml``).

- the layers run cli -> api | workers -> runs | report -> telemetry -> store | connect | broker
  | images -> sim -> inprocess -> upstream -> tokenizer -> engine;
- ``app.engine`` imports nothing of dreads but ``app.errors``, and no I/O library;
- settings are read at entry points only: no library package imports ``app.config``;
- the in-process engine imports neither the simulator nor a web server;
- nothing in ``app`` imports ``workers`` (publishers address tasks by name);
- only ``app.store`` (and ``migrations/``) imports ``sqlalchemy``.

The contracts name packages, so a new module needs no contract edit; the top of ``app/`` is
packages (each in the layers) plus ``config.py`` and ``errors.py``.
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
#: The modules at the top of app/ that are not packages.
TOP_MODULES = {"app.config", "app.errors"}


def _contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


def test_the_import_contracts_are_kept() -> None:
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_the_top_of_app_is_packages_each_in_the_layers() -> None:
    top = {f"app.{m.name}": m.ispkg for m in pkgutil.iter_modules(app.__path__)}
    assert {name for name, is_package in top.items() if not is_package} == TOP_MODULES
    layers = _contracts()["layers"]["layers"]
    named = {part.strip() for layer in layers for part in str(layer).split("|")}  # type: ignore[attr-defined]
    assert {name for name, is_package in top.items() if is_package} <= named


def test_the_unit_tests_mirror_the_packages() -> None:
    """A package's unit tests are found under its name: each folder of ``tests/unit`` is a
    package of ``app`` (or ``docs``, the documentation's tests)."""
    packages = {m.name for m in pkgutil.iter_modules(app.__path__) if m.ispkg}
    unit = {p.name for p in (ROOT / "tests" / "unit").iterdir() if (p / "__init__.py").exists()}
    assert unit - packages == {"docs"}, unit - packages
