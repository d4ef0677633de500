"""The sample outputs of README.md and docs/*.md are in step with the commands that make them.

``docs/samples.py`` runs each sample's command on the shipped examples against the simulator
and writes its output between ``<!-- sample: NAME -->`` and ``<!-- /sample -->``. This test runs
the same commands (the same input: the simulator needs no services, the whole set takes some
15 s) and compares the *fields* of each block with the fresh output: the column headers and row
labels of each table, the keys of each JSON body, the words of every other line. Numbers may
differ; a column, key or label that appears, disappears or is renamed may not. When this test
fails, run ``.venv/bin/python docs/samples.py`` and commit the pages it rewrote.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _load_samples() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_samples", ROOT / "docs" / "samples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


samples = _load_samples()
NAMES = [s.name for s in samples.SAMPLES]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every sample block, made now from the commands' output."""
    blocks: dict[str, str] = samples.generate(path=tmp_path_factory.mktemp("samples"))
    return blocks


def test_every_sample_has_one_block_on_its_page() -> None:
    on_pages = samples.read_blocks()
    unknown = sorted(set(on_pages) - set(NAMES))
    assert not unknown, f"sample markers no sample makes: {unknown}"
    for sample in samples.SAMPLES:
        pages = [page.relative_to(ROOT).as_posix() for page, _ in on_pages.get(sample.name, [])]
        assert pages == [sample.page], f"sample {sample.name!r}: blocks on {pages}"


@pytest.mark.parametrize("name", NAMES)
def test_a_sample_shows_what_its_command_prints(name: str, fresh: dict[str, str]) -> None:
    ((page, block),) = samples.read_blocks()[name]
    shown, printed = samples.fields(block), samples.fields(fresh[name])
    diff = "\n".join(difflib.unified_diff(shown, printed, "on the page", "printed now",
                                          lineterm=""))
    assert shown == printed, (
        f"the {name!r} sample of {page.relative_to(ROOT)} is stale (fields differ); run "
        f".venv/bin/python docs/samples.py {name}\n{diff}")


def test_fields_see_a_renamed_column_a_lost_key_and_a_new_label(
        fresh: dict[str, str]) -> None:
    """What the comparison catches, on the fresh output itself."""
    report = fresh["report"]
    assert samples.fields(report.replace("median rank %", "median rank")) != samples.fields(
        report)
    systemone = fresh["systemone"]
    assert samples.fields(systemone.replace('"entropy"', '"entropy_nats"')) != samples.fields(
        systemone)
    status = fresh["status"]
    assert samples.fields(status.replace("left; ETA", "left; time left")) != samples.fields(
        status)


def test_fields_ignore_numbers_and_trimmed_rows() -> None:
    """Two outputs that differ only in their numbers have the same fields; a table is cut to
    its first rows and its overall row."""
    table = ("```text\n$ dreads report r\nrun r: 10 question(s)\n"
             "┏━━━━━━┳━━━━━┓\n┃ cell ┃ AUC ┃\n┡━━━━━━╇━━━━━┩\n"
             "│ a    │ 0.9 │\n│ b    │ 0.8 │\n│ c    │ 0.7 │\n│ overall │ 0.8 │\n"
             "└──────┴─────┘\n```\n")
    other = table.replace("0.9", "0.1").replace("10 question", "12 question")
    assert samples.fields(table) == samples.fields(other)
    trimmed = samples.trim_tables(table.split("```text\n")[1].split("```")[0], keep=1)
    assert "│ b" not in trimmed and "│ overall" in trimmed and "│ ..." in trimmed
    assert "column cell" in samples.fields(table) and "row overall" in samples.fields(table)
