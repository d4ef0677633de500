"""``app.store.runs`` and the producer on real PostgreSQL and SQLite: bulk insert with
ON CONFLICT DO NOTHING, rejected templates stored with their message, the settings check,
status and export queries."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from sqlalchemy import select

from app.engine import ReadSettings, settings_hash, settings_to_dict
from app.errors import RunSettingsMismatch
from app.runs.submit import SubmitRequest, submit_job
from app.store.bulk import copy_text, decisions_copy, lay_out, payloads_copy, write_laid_out
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.models import Decision, DecisionPayload
from app.store.runs import DecisionRow, ensure_run, insert_decisions, require_run
from app.store.views import iter_export, run_status
from app.tokenizer.hf import load_tokenizer
from tests.fixtures.runs_cli import job_line, write_jobs


def _run(session, name: str = "r", settings: ReadSettings | None = None):  # type: ignore[no-untyped-def]
    settings = settings or ReadSettings()
    return ensure_run(session, name=name, settings=settings_to_dict(settings),
                      settings_hash=settings_hash(settings), upstream="http://x", engine="vllm",
                      source=None, replicates=1, fingerprint=None)


def _row(key: str, replicate: int = 0, reason: str | None = None) -> DecisionRow:
    payload = {"state": "s", "questions": {"q": {"type": "noul", "instructions": "ok?"}}}
    return DecisionRow(key=key, replicate=replicate, cell="c", line_no=1, payload=payload,
                       n_questions=1, rejected_reason=reason)


def test_bulk_insert_skips_existing(factory) -> None:  # type: ignore[no-untyped-def]
    with session_scope(factory) as session:
        run, created = _run(session)
        first = insert_decisions(session, run.id, [_row("a"), _row("b"), _row("a", 1)],
                                 batch_size=2)
    assert created and sorted((r.key, r.replicate) for _, r in first) == [
        ("a", 0), ("a", 1), ("b", 0)]
    with session_scope(factory) as session:
        run, created = _run(session)
        again = insert_decisions(session, run.id, [_row("a"), _row("c", reason="too wide")])
        report = run_status(session, require_run(session, "r"))
    assert not created and [r.key for _, r in again] == ["c"]
    assert report.counts == {"pending": 3, "rejected": 1}
    (cell,) = report.cells
    assert cell.failures == {"rejected": 1} and cell.unanswered == 1


def test_a_fresh_run_is_copied_straight_in_and_a_repeated_id_still_skipped(factory) -> None:  # type: ignore[no-untyped-def]
    """A run new to this submission takes its batches straight in (PostgreSQL: COPY, with
    ids drawn first); a batch holding an id an earlier batch wrote falls back to the insert
    that skips it and keeps the others, and every row is stored under the id returned."""
    with session_scope(factory) as session:
        run, _ = _run(session)
    tricky = {"state": "tab\there, line\nbreak, back\\slash, quote\" é", "questions": {
        "q": {"type": "noul", "instructions": "ok?"}}}
    c = _row("c\tx")._replace(payload=tricky, cell="cell\\1")
    written = []
    for rows in ([_row("a"), _row("b"), c], [_row("a"), _row("d", reason="too wide")]):
        with session_scope(factory) as session:
            laid_out = lay_out(session, run.id, rows, "queued")
        assert (laid_out is None) == (factory.kw["bind"].dialect.name == "sqlite")
        with session_scope(factory) as session:
            written += (write_laid_out(session, laid_out) if laid_out is not None
                        else insert_decisions(session, run.id, rows, status="queued"))
    assert sorted(r.key for _, r in written) == ["a", "b", "c\tx", "d"]
    with session_scope(factory) as session:
        by_key = {line["id"]: line for line in iter_export(session, run.id)}
        report = run_status(session, require_run(session, "r"))
        ids = dict(session.execute(select(Decision.key, Decision.id)).all())
        stored = session.execute(select(Decision.cell, DecisionPayload.payload).join(
            DecisionPayload, DecisionPayload.decision_id == Decision.id).where(
            Decision.key == "c\tx")).one()
    assert ids == {row.key: rid for rid, row in written}
    assert tuple(stored) == ("cell\\1", tricky)  # COPY's escapes undone exactly
    assert report.counts == {"queued": 3, "rejected": 1}
    failures = {cell.cell: cell.failures for cell in report.cells}
    assert failures["c"] == {"rejected": 1}  # its attempt row is written too
    assert {key: line["status"] for key, line in by_key.items()} == {
        "a": "queued", "b": "queued", "c\tx": "queued", "d": "rejected"}
    assert by_key["d"]["error"] == "too wide"
    # each payload is stored under its decision's id: the export joins them
    assert all(list(line["answers"]) == ["q"] for line in by_key.values())


def test_copy_text_escapes_what_copy_reads_specially() -> None:
    assert copy_text(None) == "\\N"
    assert copy_text(7) == "7"
    assert copy_text("a\tb\\c\nd\re") == "a\\tb\\\\c\\nd\\re"
    row = DecisionRow(key="k\t1", replicate=0, cell=None, line_no=None,
                      payload={"state": "line\nbreak \\ tab\t"}, n_questions=1)
    assert payloads_copy([row], [5]) == b'5\t{"state":"line\\\\nbreak \\\\\\\\ tab\\\\t"}\n'
    assert decisions_copy(1, [row], [5], "pending").decode().split("\t")[:7] == [
        "5", "1", "k\\t1", "0", "\\N", "\\N", "1"]


def test_other_settings_refused(factory) -> None:  # type: ignore[no-untyped-def]
    with session_scope(factory) as session:
        _run(session)
    with pytest.raises(RunSettingsMismatch, match=r"threshold: 0\.1 -> 0\.2"), \
            session_scope(factory) as session:
        _run(session, settings=replace(ReadSettings(), threshold=0.2))


def test_template_problems_stored_as_rejected(factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    choice = orjson.dumps({"id": "ch", "state": "s", "questions": {"t": {
        "type": "choice", "instructions": "which?",
        "criteria": {"x": None, "y": None, "z": None}}}}).decode()
    path = write_jobs(tmp_path / "j.jsonl", [job_line("n1"), choice, job_line("n2")])
    settings = ReadSettings(max_logprob_ids=2)  # a 3-option choice needs 3 logprob ids
    tok = load_tokenizer("standin")
    strict = submit_job(SubmitRequest(path=path, run_name="t", settings=settings,
                                      upstream="x", strict=True), factory, tok)
    assert strict.refused and strict.run is None
    report = submit_job(SubmitRequest(path=path, run_name="t", settings=settings,
                                      upstream="x"), factory, tok)
    assert [(p.line_no, p.key) for p in report.rejected] == [(2, "ch")]
    assert "logprob ids" in report.rejected[0].reason
    assert report.inserted == 3 and report.readable == 2  # rejected: not published
    with session_scope(factory) as session:
        records = {r["id"]: r for r in iter_export(session, report.run.id)}
    assert records["ch"]["status"] == "rejected" and "logprob ids" in records["ch"]["error"]
    assert records["n1"]["answers"]["ok"] == {"answered": False, "expected": "yes",
                                              "expected_option": "yes"}


@pytest.mark.slow
def test_bulk_submit_is_fast_on_postgresql(make_database: Callable[..., str],
                                           tmp_path: Path) -> None:
    n = 20_000
    path = write_jobs(tmp_path / "big.jsonl", [job_line(f"d{i}", cell=f"c{i % 7}")
                                               for i in range(n)])
    engine = make_engine(make_database("postgresql"))
    factory = make_sessionmaker(engine)
    tok = load_tokenizer("standin")
    t0 = time.perf_counter()
    report = submit_job(SubmitRequest(path=path, run_name="big", settings=ReadSettings(),
                                      upstream="x"), factory, tok)
    elapsed = time.perf_counter() - t0
    assert report.inserted == n and report.readable == n
    assert elapsed < 30, f"{n} decisions took {elapsed:.1f}s"
    again = submit_job(SubmitRequest(path=path, run_name="big", settings=ReadSettings(),
                                     upstream="x"), factory, tok)
    assert again.inserted == 0 and again.already_present == n
    engine.dispose()


def test_streamed_submit_finds_duplicates_across_batches(
        factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Batches of 2: a repeated id in a later batch is a bad line naming the first line (found
    in the database, not in memory); the same file again is all already present (the
    repeated id too: it names a row of the earlier submission)."""
    monkeypatch.setattr("app.runs.submit.SUBMIT_BATCH", 2)
    path = write_jobs(tmp_path / "j.jsonl", [job_line("a"), job_line("b"), job_line("c"),
                                             job_line("a"), job_line("d")])
    tok = load_tokenizer("standin")
    request = SubmitRequest(path=path, run_name="stream", settings=ReadSettings(), upstream="x")
    report = submit_job(request, factory, tok)
    assert [(p.line_no, p.reason) for p in report.bad] == [
        (4, "duplicate id 'a' (first on line 1)")]
    assert (report.lines, report.valid, report.inserted) == (5, 4, 4)
    again = submit_job(request, factory, tok)
    assert (again.inserted, again.already_present, again.bad) == (0, 5, [])
