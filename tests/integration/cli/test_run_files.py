"""No command writes over a run's own files: ``dreads export -o``, ``report --html`` and
``calibrate -o`` refuse the job file a run was submitted from (and the answer key beside it),
however the path is spelled, with exit 2, one line and the file untouched; the closing hint
of ``dreads run`` exports to a file that is not the job file. The ``dreads`` command
in-process (``tests.fixtures.cli_inprocess``) on a SQLite store, the built-in simulator
answering."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.cli_inprocess import dreads_in_process as dreads
from tests.fixtures.cli_process import Result, assert_one_line_error
from tests.fixtures.services import ROOT, free_port

EXAMPLE = ROOT / "examples" / "small.jsonl"


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Result]:
    """``dreads run tickets.jsonl --upstream sim`` in a directory of its own, with the
    answer key beside the job file."""
    here = tmp_path_factory.mktemp("tickets")
    shutil.copy(EXAMPLE, here / "tickets.jsonl")
    shutil.copy(EXAMPLE.with_name("small.key.jsonl"), here / "tickets.key.jsonl")
    result = dreads("run", "tickets.jsonl", "--upstream", "sim", cwd=here)
    assert result.code == 0, result.stderr
    return here, result


def test_the_closing_hint_exports_to_another_file(ran: tuple[Path, Result]) -> None:
    here, result = ran
    hint = result.stdout.strip().splitlines()[-1]
    assert "dreads export tickets -o tickets.answers.jsonl" in hint
    exported = dreads("export", "tickets", "-o", "tickets.answers.jsonl", cwd=here)
    assert exported.code == 0, exported.stderr
    assert (here / "tickets.jsonl").read_bytes() == EXAMPLE.read_bytes()


@pytest.mark.parametrize("spelling", ["tickets.jsonl", "./tickets.jsonl", "ABSOLUTE",
                                      "sub/../tickets.jsonl", "link.jsonl"])
def test_export_refuses_the_job_file(ran: tuple[Path, Result], spelling: str) -> None:
    here, _ = ran
    (here / "sub").mkdir(exist_ok=True)
    link = here / "link.jsonl"
    if not link.exists():
        link.symlink_to("tickets.jsonl")
    target = str(here / "tickets.jsonl") if spelling == "ABSOLUTE" else spelling
    result = dreads("export", "tickets", "-o", target, cwd=here)
    assert_one_line_error(result, says="is the job file of run 'tickets'", code=2)
    assert "-o tickets.answers.jsonl" in result.error_lines[0]
    assert (here / "tickets.jsonl").read_bytes() == EXAMPLE.read_bytes()
    assert not list(here.glob(".tickets.jsonl.*"))  # no temporary file left either


def test_export_refuses_the_answer_key(ran: tuple[Path, Result]) -> None:
    here, _ = ran
    key = here / "tickets.key.jsonl"
    before = key.read_bytes()
    result = dreads("export", "tickets", "--format", "csv", "-o", "tickets.key.jsonl",
                    cwd=here)
    assert_one_line_error(result, says="is the answer key of run 'tickets'", code=2)
    assert key.read_bytes() == before


@pytest.mark.parametrize("args", [("report", "tickets", "--html", "tickets.jsonl"),
                                  ("calibrate", "tickets", "-o", "./tickets.jsonl")])
def test_report_and_calibrate_refuse_the_job_file(ran: tuple[Path, Result],
                                                  args: tuple[str, ...]) -> None:
    here, _ = ran
    result = dreads(*args, cwd=here)
    assert_one_line_error(result, says="is the job file of run 'tickets'", code=2)
    assert (here / "tickets.jsonl").read_bytes() == EXAMPLE.read_bytes()


def test_a_run_whose_job_file_is_named_like_the_hint_gets_another(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "t.answers.jsonl")
    result = dreads("run", "t.answers.jsonl", "--run", "t", "--upstream", "sim",
                    cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert "dreads export t -o t.export.jsonl" in result.stdout
    refused = dreads("export", "t", "-o", "t.answers.jsonl", cwd=tmp_path)
    assert_one_line_error(refused, says="write to -o t.export.jsonl", code=2)


def test_submit_records_the_file_on_postgresql(make_database: Callable[..., str],
                                               tmp_path: Path) -> None:
    """``dreads submit`` records the job file as ``dreads run`` does: the export refuses it
    on PostgreSQL too."""
    db = make_database("postgresql")
    shutil.copy(EXAMPLE, tmp_path / "jobs.jsonl")
    submitted = dreads("submit", "jobs.jsonl", "--run", "pg", "--database-url", db,
                       "--broker", f"redis://127.0.0.1:{free_port()}/0", "--upstream", "sim",
                       cwd=tmp_path)
    assert submitted.code == 0, submitted.stderr
    result = dreads("export", "pg", "-o", "./jobs.jsonl", "--database-url", db, cwd=tmp_path)
    assert_one_line_error(result, says="is the job file of run 'pg'", code=2)
    assert (tmp_path / "jobs.jsonl").read_bytes() == EXAMPLE.read_bytes()
