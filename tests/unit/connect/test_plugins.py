"""``app.connect.plugins``: an answer source installed as a package is found through its entry point
the first time a process meets its name; a broken one is named in a ``ConfigError``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.connect.plugins import find_source, load_plugins
from app.engine import plans_reads, source_names
from app.engine.sources import SOURCES
from app.errors import ConfigError
from tests.fixtures import answer_source_plugin as plugin


def _install(site: Path, target: str) -> None:
    info = site / "a_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: a-plugin\nVersion: 1.0\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[dreads.answer_sources]\none = {target}\n",
                                           encoding="utf-8")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    load_plugins.cache_clear()
    yield tmp_path
    load_plugins.cache_clear()
    SOURCES.pop(plugin.NAME, None)


def test_an_installed_source_is_found_by_its_name(site: Path) -> None:
    _install(site, "tests.fixtures.answer_source_plugin:SPEC")
    assert plugin.NAME not in source_names()
    assert find_source(plugin.NAME) is plugin.SPEC
    assert not plans_reads(plugin.NAME) and source_names()[-1] == plugin.NAME


@pytest.mark.parametrize(("target", "says"), [
    ("tests.fixtures.no_such_module:SPEC", "cannot be loaded"),
    ("tests.fixtures.answer_source_plugin:NAME", "names a str, not a SourceSpec"),
])
def test_a_broken_plugin_is_named(site: Path, target: str, says: str) -> None:
    _install(site, target)
    with pytest.raises(ConfigError, match=f"plugin 'one' .*{says}"):
        find_source("nobody")


def test_a_known_name_loads_no_plugin(site: Path) -> None:
    _install(site, "tests.fixtures.no_such_module:SPEC")
    assert find_source("systemone").path == "/v1/systemone"
