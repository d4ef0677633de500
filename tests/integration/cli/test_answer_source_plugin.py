"""An answer source that exists only in the tests (``tests.fixtures.answer_source_plugin``:
its own request to the simulator's ``/v1/systemone`` route, its own reader of P(yes)) answers a
run end to end with no edit to ``app/``: registered in-process with ``register_source``, and
found by a fresh ``dreads`` process through a ``dreads.answer_sources`` entry point."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.engine import SourceSpec, register_source
from app.engine.sources import SOURCES
from tests.fixtures import answer_source_plugin as plugin
from tests.fixtures.cli_process import dreads as dreads_process
from tests.fixtures.runs_cli import CliResult, job_line, sqlite_rows, write_jobs
from tests.fixtures.sim import MakeSim

Dreads = Callable[..., CliResult]
ROOT = Path(__file__).resolve().parents[3]
N = 8


@pytest.fixture
def yes_only() -> Iterator[SourceSpec]:
    spec = register_source(plugin.SPEC)
    plugin.asked.clear()
    yield spec
    SOURCES.pop(spec.name)


def _jobs(tmp_path: Path) -> Path:
    return write_jobs(tmp_path / "jobs.jsonl",
                      [job_line(f"k{i}", cell=f"c{i % 2}", expected="yes" if i % 3 else "no")
                       for i in range(N)])


def _answers(db: Path, run: str) -> dict[str, tuple[Any, ...]]:
    rows = sqlite_rows(db, "SELECT d.key, a.probs, a.label_mass, a.draws, a.stop_reason FROM "
                       "answers a JOIN decisions d ON d.id = a.decision_id JOIN runs r ON "
                       f"r.id = d.run_id WHERE r.name = '{run}'")
    return {r[0]: (orjson.loads(r[1]) if isinstance(r[1], str) else r[1], *r[2:]) for r in rows}


def test_a_source_registered_in_process_answers_a_run_end_to_end(
        dreads: Dreads, make_sim: MakeSim, tmp_path: Path, yes_only: SourceSpec) -> None:
    sim, path, db = make_sim(), _jobs(tmp_path), tmp_path / "p.db"
    result = dreads("run", str(path), "--db", str(db), "--answer-by", yes_only.name,
                    "--answer-url", sim.url, "--json")
    assert result.code == 0, result.stderr
    assert result.json()["counts"] == {"done": N}
    assert sorted(plugin.asked) == [(f"k{i}", "dgemma") for i in range(N)]  # once each
    assert sim.stats()["decisions"] == N
    (stored,) = sqlite_rows(db, "SELECT settings FROM runs WHERE name = 'jobs'")[0]
    assert orjson.loads(stored)["answer_by"] == "yes-only"
    jev = dreads("run", str(path), "--db", str(db), "--run", "jev", "--answer-by", "systemone",
                 "--answer-url", sim.url)
    assert jev.code == 0, jev.stderr
    mine, theirs = _answers(db, "jobs"), _answers(db, "jev")
    assert mine.keys() == theirs.keys() and len(mine) == N
    for key, (probs, mass, draws, stop) in mine.items():
        assert probs == pytest.approx(theirs[key][0], abs=1e-9), key
        assert (mass, draws, stop) == (None, 1, "endpoint")  # its reader reads no mass
        assert theirs[key][1] is not None
    database = f"sqlite:///{db}"
    exported = [orjson.loads(line) for line in
                dreads("export", "jobs", "--database-url", database).stdout.splitlines()]
    assert sorted(r["id"] for r in exported) == [f"k{i}" for i in range(N)]
    assert all(r["answers"]["ok"]["label_mass"] is None for r in exported)
    report = dreads("report", "jobs", "--json", "--database-url", database)
    assert report.code == 0, report.stderr
    assert report.json()["diagnostics"]["overall"]["draw_rows"] == N


def test_an_unknown_source_is_a_usage_error(dreads: Dreads, tmp_path: Path) -> None:
    result = dreads("run", str(_jobs(tmp_path)), "--db", str(tmp_path / "u.db"),
                    "--answer-by", "nobody", "--answer-url", "http://127.0.0.1:9")
    assert result.code == 2
    assert "unknown answer source 'nobody'" in result.stderr
    assert "reads, systemone, decisions" in result.stderr


def _install_plugin(site: Path) -> None:
    """A distribution on ``site`` whose only content is the entry point naming the source."""
    info = site / "yes_only_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: yes-only-plugin\n"
                                   "Version: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(
        f"[dreads.answer_sources]\n{plugin.NAME} = tests.fixtures.answer_source_plugin:SPEC\n",
        encoding="utf-8")


def test_an_installed_plugin_answers_a_run_in_a_fresh_process(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _install_plugin(site)
    path = _jobs(tmp_path)
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH",
                                                                                  "")])}
    ran = dreads_process("run", path.name, "--answer-by", plugin.NAME, "--answer-url", "sim",
                         "--db", "p.db", "--json", cwd=tmp_path, env=env)
    assert ran.code == 0, ran.stderr
    summary = orjson.loads(ran.stdout)
    assert (summary["counts"], summary["simulator"]) == ({"done": N}, True)
    exported = dreads_process("export", "jobs", "--database-url", "sqlite:///p.db",
                              cwd=tmp_path, env=env)
    assert exported.code == 0, exported.stderr
    records = [orjson.loads(line) for line in exported.stdout.splitlines()]
    assert len(records) == N and all(r["answers"]["ok"]["label_mass"] is None for r in records)
