"""The exit status table (docs/commands.md#exit-status), followed by every kind of command and
checked through the real ``dreads`` process: 0 done, 1 the environment failed, 2 a usage or
input error, 3 done with bad lines (``--fail-on-bad-lines``), 130 interrupted."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from app.errors import (
    EXIT_BAD_LINES,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
)
from tests.fixtures.cli_process import DREADS, Result, assert_one_line_error, dreads
from tests.fixtures.services import free_port

ROOT = Path(__file__).resolve().parents[3]
SMALL = ROOT / "examples" / "small.jsonl"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with ``jobs.jsonl`` and ``d.db``, where the run ``jobs`` is finished."""
    where = tmp_path_factory.mktemp("exit-codes")
    shutil.copy(SMALL, where / "jobs.jsonl")
    result = dreads("run", "jobs.jsonl", "--upstream", "sim", "--database-url", "d.db",
                    cwd=where)
    assert result.code == EXIT_OK, result.stderr
    return where


def _dead() -> str:
    return f"http://127.0.0.1:{free_port()}"


#: (args, exit status, what the one error line says), run in the ``finished`` directory.
USAGE_ERRORS = {
    "an unknown option": (("status", "--nope"), "No such option"),
    "a missing job file": (("submit", "missing.jsonl", "--run", "x"), "cannot read job file"),
    "an unknown run": (("status", "nope", "--database-url", "d.db"), "no run named 'nope'"),
    "other settings on submit": (
        ("submit", "jobs.jsonl", "--run", "jobs", "--draws", "4", "--database-url", "d.db"),
        "exists with other settings"),
    "other settings on resume": (
        ("resume", "jobs", "--draws", "4", "--database-url", "d.db"),
        "was created with other settings"),
    "an open API without a key": (("serve", "--host", "0.0.0.0", "--upstream", "sim"),
                                  "needs DREADS_API_KEY"),
    "Flower without credentials": (("flower",), "Flower needs credentials"),
    "an unsupported database": (("status", "jobs", "--database-url", "mysql://u@h/db"),
                                "PostgreSQL or SQLite"),
    "an unknown question type": (("decide", "--state", "s", "--question", "q?", "--type", "x"),
                                 "--type must be"),
    "a missing answer key": (("serve", "--upstream", "sim", "--sim-key", "missing.key.jsonl",
                              "--port", str(free_port())),
                             "cannot read the answer key 'missing.key.jsonl'"),
    "a malformed answer key": (("serve", "--upstream", "sim", "--sim-key", "jobs.jsonl",
                                "--port", str(free_port())),
                               "jobs.jsonl:1: an answer-key line needs"),
}


@pytest.mark.parametrize("case", sorted(USAGE_ERRORS))
def test_a_usage_or_input_error_exits_2(finished: Path, case: str) -> None:
    args, says = USAGE_ERRORS[case]
    result = dreads(*args, cwd=finished)
    if case == "an unknown option":  # Click's own usage box, not an error: line
        assert result.code == EXIT_USAGE and says in result.stderr
        return
    assert_one_line_error(result, says=says, code=EXIT_USAGE)


@pytest.mark.parametrize(("key", "says"), [
    ("missing.key.jsonl", "cannot read the answer key 'missing.key.jsonl': No such file"),
    ("jobs.jsonl", "jobs.jsonl:1: an answer-key line needs"),
])
def test_the_simulator_refuses_an_answer_key_it_cannot_use_with_2(finished: Path, key: str,
                                                                   says: str) -> None:
    result = dreads("sim", "--key", key, "--port", "0", cwd=finished)
    assert result.code == EXIT_USAGE, result
    [line] = result.error_lines  # the simulator's own prefix on every line it prints
    assert line.startswith("[dreads sim] error: ") and says in line, line


def test_an_unreachable_upstream_exits_1_and_leaves_no_database(tmp_path: Path) -> None:
    shutil.copy(SMALL, tmp_path / "jobs.jsonl")
    result = dreads("run", "jobs.jsonl", "--upstream", _dead(), cwd=tmp_path, model=False)
    assert_one_line_error(result, says="start the server first", code=EXIT_FAILURE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.jsonl"]


def test_a_database_that_cannot_be_reached_exits_1(finished: Path) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/test"
    result = dreads("status", "jobs", "--database-url", url, cwd=finished)
    assert_one_line_error(result, says="Connection refused", code=EXIT_FAILURE)


def test_a_server_that_is_not_ready_exits_1(finished: Path) -> None:
    result = dreads("check-upstream", _dead(), "--wait", "1", cwd=finished)
    assert result.code == EXIT_FAILURE and "not ready" in result.stderr + result.stdout


def test_done_is_0_and_bad_lines_with_fail_on_bad_lines_is_3(tmp_path: Path) -> None:
    lines = SMALL.read_text().splitlines()[:3]
    (tmp_path / "jobs.jsonl").write_text("\n".join([*lines, "{not json"]) + "\n")
    plain = dreads("run", "jobs.jsonl", "--upstream", "sim", cwd=tmp_path)
    assert plain.code == EXIT_OK, plain.stderr
    strict = dreads("run", "jobs.jsonl", "--upstream", "sim", "--run", "again",
                    "--fail-on-bad-lines", cwd=tmp_path)
    assert strict.code == EXIT_BAD_LINES, strict.stderr


def test_ctrl_c_exits_130(finished: Path) -> None:
    waiting = subprocess.Popen([DREADS, "check-upstream", _dead(), "--wait", "60"],
                               cwd=finished, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    time.sleep(3)
    waiting.send_signal(signal.SIGINT)
    _, err = waiting.communicate(timeout=30)
    assert waiting.returncode == EXIT_INTERRUPTED and "Traceback" not in err


def test_the_documented_table_is_the_one_the_code_follows() -> None:
    page = (ROOT / "docs" / "commands.md").read_text()
    section = page.split("## Exit status", 1)[1].split("\n## ", 1)[0]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)}
    assert documented == {EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_BAD_LINES, EXIT_INTERRUPTED}


def _result_ok(result: Result) -> Result:
    assert result.code == EXIT_OK, result.stderr
    return result


def test_decide_fits_80_columns_without_breaking_a_word(finished: Path) -> None:
    result = _result_ok(dreads("decide", str(SMALL), "--upstream", "sim", cwd=finished,
                               env={"COLUMNS": "80"}))
    lines = result.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    headers = next(line for line in lines if line.startswith("question"))
    assert headers.split() == ["question", "answer", "P", "mass", "argmax", "H", "stderr",
                               "agree", "draws", "stop"]
    stops = {line.split()[-1] for line in lines if line.split() and line.split()[-1] in
             ("agreed", "max_draws", "fixed")}
    assert stops, result.stdout  # the stop reasons are whole words, not "max_dra / ws"


def test_run_help_says_what_chunk_size_is_without_a_queue(finished: Path) -> None:
    helped = _result_ok(dreads("run", "--help", cwd=finished, env={"COLUMNS": "200"}))
    line = next(line for line in helped.stdout.splitlines() if "--chunk-size" in line)
    assert "queue" not in line and "--workers" in line
