"""Every command fed the bad input a new user gives it, through the ``dreads`` command.

Each case asserts what a user relies on: a non-zero exit, exactly one line on stderr that
starts with ``error:`` and says what to do, no traceback, and nothing of theirs lost: no file
truncated or replaced, no good line dropped, no empty database left behind.

The matrices run the command in this process (``dreads_in_process``: the same entry point and
last line of defence, without a new Python's start-up per case); one case of each class of
error (a user error, a failure, bad lines kept, an interrupted run) and what needs a process of
its own (another user, a second command at once, a signal) run the real ``dreads``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from tests.fixtures.cli_inprocess import dreads_in_process
from tests.fixtures.cli_process import DREADS, Result, assert_one_line_error, dreads
from tests.fixtures.runs_cli import job_line, sqlite_rows, write_jobs
from tests.fixtures.services import (
    SHARED_PG,
    RedisServer,
    create_pg_database,
    drop_pg_database,
    free_port,
)

ROOT = Path(__file__).resolve().parents[3]
SMALL = ROOT / "examples" / "small.jsonl"
PRECIOUS = "precious content the user wrote\n"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A working directory holding a small job file."""
    shutil.copy(SMALL, tmp_path / "jobs.jsonl")
    return tmp_path


@pytest.fixture(scope="module")
def finished_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store with the finished run ``small`` (the example, on the simulator)."""
    where = tmp_path_factory.mktemp("finished")
    result = dreads_in_process("run", str(SMALL), "--upstream", "sim", "--database-url", "d.db",
                               cwd=where)
    assert result.code == 0, result.stderr
    return where / "d.db"


# -- a database that cannot be used -----------------------------------------------------------
BAD_URLS = {
    "refused port": (f"postgresql://postgres@127.0.0.1:{free_port()}/test", "Connection refused"),
    "unknown database": (SHARED_PG.rsplit("/", 1)[0] + "/no_such_db_xyz", "does not exist"),
    "sqlite in a missing directory": ("sqlite:///missing/dir/x.db", "does not exist"),
    "unsupported scheme": ("mysql://user@host/db", "PostgreSQL or SQLite, not 'mysql'"),
    "not a URL": ("postgresql://user@host:notaport/db", "not a database URL"),
}
STORE_COMMANDS = {
    "status": ("status", "r"), "runs": ("runs",), "export": ("export", "r"),
    "resume": ("resume", "r"), "cancel": ("cancel", "r"), "delete": ("delete", "r", "--yes"),
    "db current": ("db", "current"), "report": ("report", "r"),
    "calibrate": ("calibrate", "r", "-o", "calib.json"),
    "submit": ("submit", "jobs.jsonl", "--run", "r"), "worker": ("worker",),
}


@pytest.mark.parametrize("command", sorted(STORE_COMMANDS))
@pytest.mark.parametrize("case", ["refused port", "sqlite in a missing directory"])
def test_every_store_command_says_in_one_line_that_the_database_cannot_be_used(
        work: Path, command: str, case: str) -> None:
    url, says = BAD_URLS[case]
    result = dreads_in_process(*STORE_COMMANDS[command], "--database-url", url, cwd=work)
    assert_one_line_error(result, says=says)
    assert "--database-url" in result.stderr or "dreads db upgrade" in result.stderr
    assert not (work / "missing").exists()  # nothing created for a typo
    assert not (work / "calib.json").exists()


#: A user error (exit 2) and a failure (exit 1), each through the real command.
CLASSES_OF_ERROR = {
    "user error": (("status", "r"), "no dreads database at", 2),
    "failure": (("status", "r", "--database-url", BAD_URLS["refused port"][0]),
                "Connection refused", 1),
}


@pytest.mark.parametrize("case", sorted(CLASSES_OF_ERROR))
def test_each_class_of_error_is_one_line_from_the_real_command(work: Path, case: str) -> None:
    args, says, code = CLASSES_OF_ERROR[case]
    assert_one_line_error(dreads(*args, cwd=work), says=says, code=code)
    assert not (work / "dreads.db").exists()


@pytest.mark.parametrize("case", sorted(BAD_URLS))
@pytest.mark.parametrize("command", ["status", "db upgrade"])
def test_each_kind_of_bad_database_url_is_one_line(work: Path, case: str, command: str) -> None:
    url, says = BAD_URLS[case]
    args = ("db", "upgrade") if command == "db upgrade" else STORE_COMMANDS[command]
    result = dreads_in_process(*args, cwd=work, env={"DREADS_DATABASE_URL": url})
    assert_one_line_error(result, says=says)
    assert not (work / "missing").exists()


@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
def empty_database(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database that exists and holds no dreads schema: a new PostgreSQL database, or an
    empty SQLite file."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("empty") / "empty.db"
        path.touch()
        yield f"sqlite:///{path}"
        return
    url = create_pg_database(SHARED_PG, "empty", migrate=False)
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.mark.parametrize("command", sorted(set(STORE_COMMANDS) - {"db current"}))
def test_every_store_command_says_a_database_without_the_schema_needs_db_upgrade(
        work: Path, empty_database: str, command: str) -> None:
    result = dreads_in_process(*STORE_COMMANDS[command], "--database-url", empty_database, cwd=work)
    assert_one_line_error(result, says="has no dreads schema", code=2)
    assert "dreads db upgrade" in result.stderr


def test_serve_says_a_postgresql_database_without_the_schema_needs_db_upgrade(
        work: Path) -> None:
    url = create_pg_database(SHARED_PG, "empty", migrate=False)
    try:
        result = dreads("serve", "--database-url", url, "--upstream", "sim", "--port",
                        str(free_port()), cwd=work)
    finally:
        drop_pg_database(url)
    assert_one_line_error(result, says="has no dreads schema", code=2)
    assert "dreads db upgrade" in result.stderr


def test_db_current_of_a_database_without_the_schema_is_none(work: Path,
                                                              empty_database: str) -> None:
    result = dreads_in_process("db", "current", "--database-url", empty_database, cwd=work)
    assert result.code == 2, result  # `dreads db current || dreads db upgrade`
    assert result.stdout.startswith("database: none; code: "), result.stdout
    assert "dreads db upgrade" in result.stderr and "Traceback" not in result.stderr


def test_a_read_command_never_creates_an_empty_database(work: Path) -> None:
    for args in (("status", "r"), ("runs",), ("export", "r"), ("report", "r")):
        result = dreads_in_process(*args, cwd=work)
        assert_one_line_error(result, says="no dreads database at", code=2)
        assert "dreads run" in result.stderr
    assert not (work / "dreads.db").exists()


# -- job files ---------------------------------------------------------------------------------
def _job_file_cases(work: Path) -> dict[str, tuple[Path, str]]:
    (work / "adir").mkdir()
    (work / "empty.jsonl").write_text("\n  \n")
    (work / "utf16.jsonl").write_text(SMALL.read_text(), encoding="utf-16")
    return {
        "missing": (work / "nope.jsonl", "No such file"),
        "a directory": (work / "adir", "is a directory"),
        "empty": (work / "empty.jsonl", "has no decisions"),
        "UTF-16": (work / "utf16.jsonl", "UTF-16"),
        "unreadable": (Path("/proc/self/mem"), "cannot read job file"),
    }


@pytest.mark.parametrize("case", ["missing", "a directory", "empty", "UTF-16", "unreadable"])
@pytest.mark.parametrize("command", ["run", "submit", "decide"])
def test_a_job_file_that_cannot_be_used_is_one_line_and_writes_nothing(
        work: Path, command: str, case: str) -> None:
    path, says = _job_file_cases(work)[case]
    args = {"run": ("run", str(path), "--upstream", "sim"),
            "submit": ("submit", str(path), "--run", "r", "--upstream", "sim"),
            "decide": ("decide", str(path), "--upstream", "sim")}[command]
    result = dreads_in_process(*args, cwd=work)
    assert_one_line_error(result, says=says, code=2)
    assert not (work / "dreads.db").exists()


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"),
                    reason="root reads every file; setpriv is needed to drop privileges")
def test_a_job_file_without_read_permission(tmp_path_factory: pytest.TempPathFactory) -> None:
    work = Path(os.path.realpath("/tmp")) / f"dreads-perm-{os.getpid()}"
    work.mkdir()
    try:
        work.chmod(0o777)
        job = work / "jobs.jsonl"
        shutil.copy(SMALL, job)
        job.chmod(0)
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] \
            if os.geteuid() == 0 else []
        done = subprocess.run([*prefix, DREADS, "run", str(job), "--upstream", "sim"], cwd=work,
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "DREADS_MODEL": "dgemma", "NO_COLOR": "1"})
        result = Result(done.returncode, done.stdout, done.stderr)
        assert_one_line_error(result, says="Permission denied", code=2)
        assert not (work / "dreads.db").exists()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _with_latin1_line(work: Path) -> Path:
    lines = SMALL.read_bytes().splitlines(keepends=True)
    bad = '{"id": "caf\u00e9", "state": "x", "questions": {}}\n'.encode("latin-1")
    path = work / "mixed.jsonl"
    path.write_bytes(b"".join(lines[:2]) + bad + b"".join(lines[2:]))
    return path


def test_run_keeps_every_good_line_around_one_that_is_not_utf8(work: Path) -> None:
    shutil.copy(ROOT / "examples" / "small.key.jsonl", work / "mixed.key.jsonl")
    result = dreads_in_process("run", str(_with_latin1_line(work)), "--upstream", "sim",
                               cwd=work)
    assert result.code == 0, result.stderr
    assert "Traceback" not in result.stderr
    flat = re.sub(r"[│┃\s]+", " ", result.stderr)  # the bad-lines table, unfolded
    assert "not UTF-8 text: byte 0xe9 at offset" in flat
    assert sqlite_rows(work / "dreads.db", "SELECT status, count(*) FROM decisions "
                       "GROUP BY status") == [("done", 5)]
    strict = dreads("run", str(work / "mixed.jsonl"), "--upstream", "sim",  # the real command
                    "--fail-on-bad-lines", cwd=work)
    assert strict.code == 3, strict.stderr  # stored and run, but a script notices


def test_submit_keeps_every_good_line_around_one_that_is_not_utf8(
        work: Path, cli_redis: RedisServer) -> None:
    assert dreads_in_process("db", "upgrade", "--database-url", "s.db", cwd=work).code == 0
    result = dreads_in_process("submit", str(_with_latin1_line(work)), "--run", "m",
                               "--upstream", "sim", "--database-url", "s.db", "--broker",
                               cli_redis.url, "--fail-on-bad-lines", "--json", cwd=work)
    assert result.code == 3, result.stderr
    [bad] = orjson.loads(result.stdout)["bad_lines"]
    assert bad["line"] == 3 and bad["reason"].startswith("not UTF-8 text: byte 0xe9 at offset")
    assert sqlite_rows(work / "s.db", "SELECT count(*) FROM decisions") == [(5,)]


def test_a_file_of_only_bad_lines_creates_no_run(work: Path) -> None:
    path = write_jobs(work / "bad.jsonl", ["not json", "{}", "[1, 2]"])
    result = dreads_in_process("run", str(path), "--upstream", "sim", cwd=work)
    assert result.code == 2 and "Traceback" not in result.stderr
    assert "none of the 3 line(s) is a valid decision" in result.stderr
    assert sorted(p.name for p in work.iterdir()) == ["bad.jsonl", "jobs.jsonl"]  # no database


# -- the user's output files -------------------------------------------------------------------
OUTPUT_COMMANDS = {
    "export -o": ("export", "{run}", "-o", "{out}"),
    "export --format csv -o": ("export", "{run}", "--format", "csv", "-o", "{out}"),
    "report --html": ("report", "{run}", "--html", "{out}"),
    "calibrate -o": ("calibrate", "{run}", "-o", "{out}"),
}


@pytest.mark.parametrize("command", sorted(OUTPUT_COMMANDS))
def test_a_failed_command_leaves_the_users_file_as_it_was(
        finished_db: Path, tmp_path: Path, command: str) -> None:
    out = tmp_path / "mine.txt"
    out.write_text(PRECIOUS)
    args = [a.format(run="nope", out=out) for a in OUTPUT_COMMANDS[command]]
    result = dreads_in_process(*args, "--database-url", str(finished_db), cwd=tmp_path)
    assert_one_line_error(result, says="no run named 'nope'", code=2)
    assert out.read_text() == PRECIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]  # no temp file left


@pytest.mark.parametrize("command", sorted(OUTPUT_COMMANDS))
def test_a_successful_command_replaces_the_file_whole(
        finished_db: Path, tmp_path: Path, command: str) -> None:
    out = tmp_path / "mine.txt"
    out.write_text(PRECIOUS)
    out.chmod(0o640)
    args = [a.format(run="small", out=out) for a in OUTPUT_COMMANDS[command]]
    result = dreads_in_process(*args, "--database-url", str(finished_db), cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert PRECIOUS not in out.read_text() and out.stat().st_size > 100
    assert out.stat().st_mode & 0o777 == 0o640  # the file keeps its permissions
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


@pytest.mark.parametrize(("where", "says"), [("adir", "is a directory"),
                                             ("no/such/dir/x.jsonl", "does not exist")])
def test_an_output_path_that_cannot_be_written(finished_db: Path, tmp_path: Path, where: str,
                                               says: str) -> None:
    (tmp_path / "adir").mkdir()
    for args in (("export", "small", "-o", where), ("report", "small", "--html", where)):
        result = dreads_in_process(*args, "--database-url", str(finished_db), cwd=tmp_path)
        assert_one_line_error(result, says=says, code=2)


# -- the store file of `dreads run` -----------------------------------------------------------
def test_run_refuses_a_store_that_is_not_a_sqlite_file_and_keeps_it(work: Path) -> None:
    before = digest(work / "jobs.jsonl")
    result = dreads_in_process("run", "jobs.jsonl", "--upstream", "sim", "--database-url",
                               "jobs.jsonl", cwd=work)
    assert_one_line_error(result, says="not a database")
    assert digest(work / "jobs.jsonl") == before
    (work / "adir").mkdir()
    in_a_directory = dreads_in_process("run", "jobs.jsonl", "--database-url", "adir", cwd=work)
    assert_one_line_error(in_a_directory, says="is a directory", code=2)
    pg = dreads_in_process("run", "jobs.jsonl", "--database-url", SHARED_PG, cwd=work)
    assert_one_line_error(pg, says="SQLite file", code=2)


def test_the_old_option_names_still_work_but_help_shows_one(finished_db: Path,
                                                           tmp_path: Path) -> None:
    for alias in ("--db", "--database", "--database-url"):
        result = dreads_in_process("status", "small", alias, str(finished_db), cwd=tmp_path)
        assert result.code == 0, result.stderr
        assert "done 5" in result.stdout
    shown = dreads_in_process("status", "--help", cwd=tmp_path).stdout
    assert "--database-url" in shown and "--db " not in shown and "<bool>" not in shown


def test_delete_asks_and_a_script_must_say_yes(finished_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "copy.db"
    shutil.copy(finished_db, db)
    refused = dreads_in_process("delete", "small", "--database-url", str(db), cwd=tmp_path)
    assert_one_line_error(refused, says="pass --yes", code=2)
    assert sqlite_rows(db, "SELECT count(*) FROM decisions") == [(5,)]
    done = dreads_in_process("delete", "small", "--yes", "--database-url", str(db), cwd=tmp_path)
    assert done.code == 0 and "deleted run 'small': 5 decision(s)" in done.stdout
    assert sqlite_rows(db, "SELECT count(*) FROM runs") == [(0,)]
    assert sqlite_rows(db, "SELECT count(*) FROM attempts") == [(0,)]


# -- one SQLite file, two commands at once -----------------------------------------------------
@pytest.fixture
def running(make_sim: Callable[..., object], tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A ``dreads run`` of 60 decisions against a slow simulator, in the background."""
    sim = make_sim(step_ms=50, max_batch=4)
    path = write_jobs(tmp_path / "long.jsonl", [job_line(f"l{i:02d}") for i in range(60)])
    proc = subprocess.Popen([DREADS, "run", str(path), "--upstream", sim.url,  # type: ignore[attr-defined]
                             "--chunk-size", "4"], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DREADS_MODEL": "dgemma", "NO_COLOR": "1"})
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def _wait_started(db: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if sqlite_rows(db, "SELECT count(*) FROM decisions WHERE status = 'done'")[0][0]:
                return
        except Exception:  # not created yet
            pass
        time.sleep(0.2)
    raise AssertionError("the background run did not start")


def test_a_second_run_on_the_same_file_is_refused_and_the_first_goes_on(
        running: subprocess.Popen[str], tmp_path: Path) -> None:
    db = tmp_path / "dreads.db"
    _wait_started(db, running)
    other = write_jobs(tmp_path / "other.jsonl", [job_line("o1")])
    second = dreads("run", str(other), "--upstream", "sim", cwd=tmp_path)
    assert_one_line_error(second, says="another `dreads run` is using", code=2)
    watching = dreads("status", "long", cwd=tmp_path)  # reading while it runs is fine
    assert watching.code == 0 and "Traceback" not in watching.stderr
    _, err = running.communicate(timeout=180)
    assert running.returncode == 0, err
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == \
        [("done", 60)]
    assert sqlite_rows(db, "SELECT count(*) FROM runs WHERE name = 'other'") == [(0,)]


def test_an_interrupted_run_loses_nothing_and_the_same_command_finishes_it(
        running: subprocess.Popen[str], tmp_path: Path) -> None:
    db = tmp_path / "dreads.db"
    _wait_started(db, running)
    os.killpg(running.pid, signal.SIGINT)
    _, err = running.communicate(timeout=60)
    assert running.returncode == 130 and "Traceback" not in err
    assert "Nothing is lost" in err
    args = running.args[1:]  # type: ignore[index]
    again = dreads(*args, cwd=tmp_path, timeout=180)
    assert again.code == 0, again.stderr
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == \
        [("done", 60)]
    assert sqlite_rows(db, "SELECT count(*) FROM answers") == [(60,)]


# -- lines no database can store ---------------------------------------------------------------
def _deep(levels: int) -> str:
    """A placeholder for a JSON array nested ``levels`` deep (no encoder writes one)."""
    return f"<deep {levels}>"


def _nested(levels: int) -> str:
    return "[" * levels + '"x"' + "]" * levels


#: Each bad line (by what it holds) -> the reason a user reads, the same on every database.
UNSTORABLE = {
    "NUL in the id": ({"id": "b\u0000d"}, "holds a NUL character (\\u0000)"),
    "NUL in the cell": ({"cell": "c\u0000"}, "'cell' holds a NUL character (\\u0000)"),
    "NUL in the state": ({"state": "a\u0000b"}, "'state' holds a NUL character (\\u0000)"),
    "NUL in a question id": ({"questions": {"o\u0000k": {"type": "noul",
                                                          "instructions": "Lawful?"}}},
                             "'questions' holds a NUL character (\\u0000)"),
    "an id of 501 characters": ({"id": "i" * 501}, "is 501 characters long; the limit is 500"),
    "a cell of 201 characters": ({"cell": "c" * 201},
                                 "'cell' is 201 characters long; the limit is 200"),
    "a question id of 501 characters": (
        {"questions": {"q" * 501: {"type": "noul", "instructions": "Lawful?"}}},
        "question id 'qqq"),
    "a state nested 300 deep": ({"state": _deep(300)},
                                "'state' is nested deeper than 64 levels; flatten it"),
    "a line nested 1,100 deep": ({"state": _deep(1100)},
                                 "the line is nested deeper than 64 levels; flatten it"),
}
#: Where the bad lines sit: past the first batches a submit commits (its second batch and on).
_GOOD_LINES, _FIRST_BAD = 700, 501


def _file_with_unstorable_lines(where: Path) -> Path:
    lines = [job_line(f"d{i}", expected=None) for i in range(1, _GOOD_LINES + 1)]
    for offset, (change, _) in enumerate(UNSTORABLE.values()):
        obj = {**orjson.loads(job_line(f"bad{offset}", expected=None)), **change}
        text = orjson.dumps(obj).decode()
        for levels in (300, 1100):
            text = text.replace(f'"{_deep(levels)}"', _nested(levels))
        lines.insert(_FIRST_BAD - 1 + offset, text)
    return write_jobs(where / "unstorable.jsonl", lines)


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_lines_no_database_stores_are_bad_lines_and_the_rest_is_stored(
        work: Path, cli_redis: RedisServer, database: str) -> None:
    """NUL characters, over-long ids, cells and question ids and deep nesting are refused at
    validation with one reason each, the same on SQLite and PostgreSQL; every other line of
    the file is stored, and a rerun stores nothing twice and fails on nothing."""
    path = _file_with_unstorable_lines(work)
    url = "s.db" if database == "sqlite" else create_pg_database(SHARED_PG, "unstorable")
    try:
        if database == "sqlite":
            assert dreads_in_process("db", "upgrade", "--database-url", url, cwd=work).code == 0
        args = ("submit", str(path), "--run", "u", "--upstream", "sim", "--database-url", url,
                "--broker", cli_redis.url, "--json")
        first = dreads_in_process(*args, cwd=work)
        assert first.code == 0, first.stderr
        report = orjson.loads(first.stdout)
        assert report["inserted"] == _GOOD_LINES, report
        reasons = [bad["reason"] for bad in report["bad_lines"]]
        assert [bad["line"] for bad in report["bad_lines"]] == list(
            range(_FIRST_BAD, _FIRST_BAD + len(UNSTORABLE)))
        for reason, (_, says) in zip(reasons, UNSTORABLE.values(), strict=True):
            assert says in reason and "\n" not in reason
        again = dreads_in_process(*args, cwd=work)
        assert again.code == 0, again.stderr
        assert orjson.loads(again.stdout)["already_present"] == _GOOD_LINES
        assert [b["reason"] for b in orjson.loads(again.stdout)["bad_lines"]] == reasons
    finally:
        if database == "postgresql":
            drop_pg_database(url)


@pytest.mark.parametrize(("name", "says"), [
    ("a\r\nb", "holds a control character"), ("a/b", "holds '/' or '..'"),
    ("a..b", "holds '/' or '..'"), ("n" * 201, "is 201 characters long; the limit is 200"),
    ("a\u0000b", "holds a NUL character")])
def test_a_run_name_that_cannot_be_stored_or_addressed_is_refused_before_anything(
        work: Path, name: str, says: str) -> None:
    result = dreads_in_process("run", "jobs.jsonl", "--run", name, "--upstream", "sim",
                               cwd=work)
    assert_one_line_error(result, says=says, code=2)
    assert sorted(p.name for p in work.iterdir()) == ["jobs.jsonl"]  # no database


def test_a_bad_lines_id_is_shown_escaped_and_the_good_lines_run(work: Path) -> None:
    lines = [job_line("d1", expected=None), job_line("bad\u0000id\r", expected=None)]
    path = write_jobs(work / "nul.jsonl", lines)
    result = dreads_in_process("run", str(path), "--upstream", "sim", cwd=work)
    assert result.code == 0, result.stderr
    assert "\x00" not in result.stderr and "\r" not in result.stderr
    assert "bad\\x00id\\r" in result.stderr
    assert sqlite_rows(work / "dreads.db", "SELECT key, status FROM decisions") == [
        ("d1", "done")]
