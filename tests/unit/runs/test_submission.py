"""``submit_run``: the one submission path of ``dreads submit``, ``dreads run`` and the API.
It looks the run up for the entry point's resolution, keeps the run's replicate count, and a
submission that stored nothing leaves no run behind (no caller has to remember)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.connect.factory import UpstreamConfig
from app.engine import ReadSettings
from app.runs.embedded import sqlite_store
from app.runs.submission import Resolved, Submission, submit_run
from app.store.db import session_scope
from app.store.records import RunInfo
from app.store.runs import find_run
from app.store.types import SessionFactory
from app.tokenizer.hf import load_tokenizer
from tests.fixtures.runs_cli import job_line, write_jobs


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[SessionFactory]:
    with sqlite_store(tmp_path / "d.db") as made:
        yield made


class _Resolver:
    """A resolution that records which run it was given."""

    def __init__(self) -> None:
        self.seen: list[RunInfo | None] = []

    def __call__(self, existing: RunInfo | None) -> Resolved:
        self.seen.append(existing)
        return Resolved(ReadSettings(model="m", tokenizer="standin"), "sim", UpstreamConfig(),
                        load_tokenizer("standin"))


def _stored(factory: SessionFactory, name: str) -> RunInfo | None:
    with session_scope(factory) as session:
        return find_run(session, name)


def test_a_file_of_only_bad_lines_leaves_no_run(factory: SessionFactory,
                                                tmp_path: Path) -> None:
    path = write_jobs(tmp_path / "bad.jsonl", ["{not json", '{"id": "x"}'])
    submitted = submit_run(factory, Submission(path, "empty"), _Resolver())
    assert submitted.report.run is None and len(submitted.report.bad) == 2
    assert _stored(factory, "empty") is None


def test_an_existing_run_is_resolved_as_itself_and_keeps_its_replicates(
        factory: SessionFactory, tmp_path: Path) -> None:
    resolve = _Resolver()
    first = write_jobs(tmp_path / "a.jsonl", [job_line("a")])
    submit_run(factory, Submission(first, "r", replicates=3), resolve)
    requests: list[object] = []
    more = write_jobs(tmp_path / "b.jsonl", [job_line("b")])
    submitted = submit_run(factory, Submission(more, "r"), resolve,
                           publisher_for=lambda request: requests.append(request))
    assert resolve.seen[0] is None
    assert resolve.seen[1] is not None and resolve.seen[1].name == "r"
    assert [getattr(r, "replicates", None) for r in requests] == [3]
    assert submitted.report.inserted == 3 and _stored(factory, "r") is not None  # 3 copies
