"""``app.runs.jobfile``: job files as numbered lines, a line that is not UTF-8 as a bad line."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from app.errors import BadLine, InputError
from app.runs.jobfile import (
    check_job_file,
    decode_lines,
    has_content,
    parse_job_lines,
    read_job_file,
)


def test_lines_are_numbered_from_one_and_blank_lines_skipped() -> None:
    raw = io.BytesIO(b'{"a": 1}\n\n   \n{"b": 2}\r\n')
    assert list(decode_lines(raw)) == [(1, '{"a": 1}\n'), (4, '{"b": 2}\r\n')]


def test_a_line_that_is_not_utf8_is_a_bad_line_with_where_and_why() -> None:
    raw = io.BytesIO(b'{"a": 1}\n{"id": "caf\xe9"}\n{"c": 3}\n')
    out = list(decode_lines(raw))
    assert [n for n, _ in out] == [1, 2, 3]
    bad = out[1][1]
    assert isinstance(bad, BadLine) and bad.line_no == 2
    assert bad.reason.startswith("not UTF-8 text: byte 0xe9 at offset 20 of the file "
                                 "(byte 12 of the line)")
    assert "save the file as UTF-8" in bad.reason
    assert out[2] == (3, '{"c": 3}\n')  # the lines after it are read on


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_line() -> None:
    assert list(decode_lines(io.BytesIO(b'\xef\xbb\xbf{"a": 1}\n'))) == [(1, '{"a": 1}\n')]


@pytest.mark.parametrize(("data", "expected"), [
    (b"", False), (b" \n\t\n", False), (b"\xef\xbb\xbf\n", False), (b"\n\n{}", True)])
def test_has_content(data: bytes, expected: bool) -> None:
    assert has_content(io.BytesIO(data)) is expected


@pytest.mark.parametrize(("content", "says"), [
    (None, "No such file"), (b"", "has no decisions"), (b"\n \n", "has no decisions"),
    ("{}\n".encode("utf-16"), "UTF-16"), ("dir", "is a directory")])
def test_a_file_that_cannot_be_used_at_all(tmp_path: Path, content: bytes | str | None,
                                           says: str) -> None:
    path = tmp_path / "jobs.jsonl"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(InputError, match=says):
        check_job_file(path)
    with pytest.raises(InputError, match=says):
        list(read_job_file(path))


# -- fields: an unknown one makes the line bad, named with the closest known one --------------
_NOUL = {"type": "noul", "instructions": "Conflict?"}


def _problems(*objs: object) -> list[tuple[int, str | None, str]]:
    lines = [(n, orjson.dumps(o).decode()) for n, o in enumerate(objs, start=1)]
    return [(p.line_no, p.key, p.reason) for p in parse_job_lines(lines).bad]


@pytest.mark.parametrize(("line", "says"), [
    ({"id": "d1", "state": "s", "questions": {"c": _NOUL}, "expeted": {"c": "yes"}},
     "unknown field 'expeted' (did you mean 'expected'?)"),
    ({"id": "d1", "state": "s", "questions": {"c": _NOUL}, "cel": "C1"},
     "unknown field 'cel' (did you mean 'cell'?)"),
    ({"id": "d1", "state": "s", "questions": {"c": {**_NOUL, "critera": None}}},
     "question 'c': unknown field 'critera' (did you mean 'criteria'?)"),
    ({"id": "d1", "state": "s", "questions": {"c": _NOUL}, "zzz": 1},
     "unknown field 'zzz'; a line has the fields id, cell, state, questions, expected"),
    ({"custom_id": "d1", "body": {"state": "s", "questions": {"c": _NOUL}},
      "metdata": {"cell": "C1"}}, "unknown field 'metdata' (did you mean 'metadata'?)"),
    ({"custom_id": "d1", "body": {"state": "s", "questions": {"c": _NOUL}, "expectd": {}}},
     "unknown field 'expectd' (did you mean 'expected'?)"),
])
def test_an_unknown_field_is_a_bad_line_that_names_it_and_the_closest_known_one(
        line: dict[str, object], says: str) -> None:
    [(line_no, key, reason)] = _problems(line)
    assert (line_no, key) == (1, "d1")
    assert says in reason


def test_metadata_of_a_batch_line_stays_free_form() -> None:
    line = {"custom_id": "d1", "method": "POST", "url": "/v1/systemone",
            "body": {"model": "m", "state": "s", "questions": {"c": _NOUL}},
            "metadata": {"cell": "C1", "expected": {"c": "yes"}, "owner": "ann", "n": 3}}
    job = parse_job_lines([(1, orjson.dumps(line).decode())])
    assert job.bad == []
    [(_, decision)] = job.decisions
    assert (decision.cell, decision.expected) == ("C1", {"c": "yes"})


@pytest.mark.parametrize(("line", "key"), [
    ({"id": "d7", "state": "s", "questions": {}}, "d7"),
    ({"id": 42, "questions": {"c": _NOUL}}, "42"),
    ({"custom_id": "b3", "body": "not an object"}, "b3"),
    ({"input": "x", "questions": [{"type": "predicate", "name": "p", "instructions": "?"}],
      "model": "m", "metadata": {"id": "m9"}, "extra": 1}, "m9"),
    (["not", "an", "object"], None),
])
def test_a_bad_line_keeps_its_id_in_the_report(line: object, key: str | None) -> None:
    [(_, found, _)] = _problems(line)
    assert found == key
