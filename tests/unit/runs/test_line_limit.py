"""A job line over the limit is a bad line read past in pieces, never held whole; the lines
around it are read as usual."""

from __future__ import annotations

import io

from app.errors import BadLine
from app.runs.jobfile import decode_lines
from app.runs.line_limit import Overlong, bounded_lines


def test_an_overlong_line_is_skipped_by_its_length() -> None:
    raw = io.BytesIO(b"short\n" + b"x" * 5000 + b"\nafter\nlast-no-newline")
    assert list(bounded_lines(raw, 100)) == [b"short\n", Overlong(5001), b"after\n",
                                             b"last-no-newline"]


def test_an_overlong_last_line_without_newline_is_skipped_too() -> None:
    assert list(bounded_lines(io.BytesIO(b"a\n" + b"y" * 300), 100)) == [b"a\n", Overlong(300)]


def test_a_job_file_reports_it_as_one_bad_line_and_keeps_the_others() -> None:
    raw = io.BytesIO(b'{"a": 1}\n' + b"z" * 2_000_000 + b'\n{"b": 2}\n')
    lines = list(decode_lines(raw, max_line_bytes=1000))
    assert [n for n, _ in lines] == [1, 2, 3]
    assert (lines[0][1], lines[2][1]) == ('{"a": 1}\n', '{"b": 2}\n')
    bad = lines[1][1]
    assert isinstance(bad, BadLine)
    assert bad.message == ("line 2: 2,000,001 bytes, over the limit of 1,000 per line; split "
                           "the decision or send its images as URLs")
