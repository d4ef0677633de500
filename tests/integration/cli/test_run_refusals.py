"""What an existing run refuses, said the way the user typed it: a cancelled run takes no new
lines (``submit`` and ``run`` refuse it with ``resume``'s words, exit 2, nothing stored), and
a settings mismatch names the options (``--mode isolated -> joint``, ``--draws 1 -> 2``).
Real ``dreads`` processes on SQLite and PostgreSQL."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.cli_process import assert_one_line_error, dreads
from tests.fixtures.runs_cli import job_line, run_counts, write_jobs
from tests.fixtures.services import ROOT, free_port

CANCELLED = "run 'cancel-me' was cancelled; submit its file under a new run name to run it again"


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_submit_to_a_cancelled_run_is_refused(kind: str, make_database: Callable[..., str],
                                              tmp_path: Path) -> None:
    db = make_database(kind)
    dead_broker = f"redis://127.0.0.1:{free_port()}/0"  # rows stay pending: nothing to wait on
    first = write_jobs(tmp_path / "first.jsonl", [job_line(f"a{i}") for i in range(3)])
    more = write_jobs(tmp_path / "more.jsonl", [job_line(f"m{i}") for i in range(4)])
    common = ("--run", "cancel-me", "--database-url", db, "--broker", dead_broker,
              "--upstream", "sim")
    assert dreads("submit", str(first), *common, cwd=tmp_path).code == 0
    assert dreads("cancel", "cancel-me", "--database-url", db, cwd=tmp_path).code == 0

    refused = dreads("submit", str(more), *common, cwd=tmp_path)
    assert_one_line_error(refused, says=CANCELLED, code=2)
    assert run_counts(db, "cancel-me") == {"cancelled": 3}
    resumed = dreads("resume", "cancel-me", "--database-url", db, "--broker", dead_broker,
                     cwd=tmp_path)
    assert_one_line_error(resumed, says=CANCELLED, code=2)


def test_run_of_a_cancelled_run_is_refused_with_the_same_words(
        make_database: Callable[..., str], tmp_path: Path) -> None:
    db = make_database("sqlite")
    first = write_jobs(tmp_path / "first.jsonl", [job_line(f"a{i}") for i in range(3)])
    more = write_jobs(tmp_path / "more.jsonl", [job_line(f"m{i}") for i in range(4)])
    assert dreads("submit", str(first), "--run", "cancel-me", "--database-url", db,
                  "--broker", f"redis://127.0.0.1:{free_port()}/0", "--upstream", "sim",
                  cwd=tmp_path).code == 0
    assert dreads("cancel", "cancel-me", "--database-url", db, cwd=tmp_path).code == 0
    refused = dreads("run", str(more), "--run", "cancel-me", "--database-url", db,
                     "--upstream", "sim", cwd=tmp_path)
    assert_one_line_error(refused, says=CANCELLED, code=2)
    assert run_counts(db, "cancel-me") == {"cancelled": 3}


@pytest.mark.parametrize(("options", "says"), [
    (("--mode", "joint"), "(--mode isolated -> joint)"),
    (("--draws", "2"), "(--draws 1 -> 2; --policy agree -> fixed)"),
    (("--replicates", "2"), "(--replicates 1 -> 2)"),
])
def test_a_settings_mismatch_names_the_options(tmp_path: Path, options: tuple[str, ...],
                                               says: str) -> None:
    shutil.copy(ROOT / "examples" / "small.jsonl", tmp_path / "x.jsonl")
    assert dreads("run", "x.jsonl", "--upstream", "sim", cwd=tmp_path).code == 0
    again = dreads("run", "x.jsonl", "--upstream", "sim", *options, cwd=tmp_path)
    assert_one_line_error(again, says=f"run 'x' exists with other settings {says}; submit "
                          "under a new run name, or repeat the run's own settings", code=2)
    if options[0] != "--replicates":
        resumed = dreads("resume", "x", *options, cwd=tmp_path)
        assert_one_line_error(resumed, says=f"run 'x' was created with other settings {says}",
                              code=2)
