"""``app.runs.jobfile``: job files as numbered lines, a line that is not UTF-8 as a bad line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from app.errors import BadLine, InputError
from app.runs.jobfile import check_job_file, decode_lines, has_content, read_job_file


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
