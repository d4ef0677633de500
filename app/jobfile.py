"""Job files as numbered lines: bytes in, ``(line number, text)`` out, for the CLI and the API.

A line that is not UTF-8 is a bad line like any other (its number, the byte offset and the
reason), not the end of the file: the good lines around it are kept. Problems of the whole
file (missing, a directory, unreadable, empty, UTF-16) are an ``InputError`` raised before
anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from app.errors import BadLine, InputError

__all__ = ["NumberedLine", "check_job_file", "decode_lines", "has_content", "read_job_file"]

#: ``(line number, text)``, or ``(line number, BadLine)`` for a line that is not UTF-8.
NumberedLine = tuple[int, "str | BadLine"]
_BOM = "\ufeff"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_PEEK = 64 * 1024


def decode_lines(raw: Iterable[bytes]) -> Iterator[NumberedLine]:
    """Every non-blank line of ``raw`` (a binary file, or any iterable of lines), numbered from
    1; an undecodable line comes as a ``BadLine`` saying where and why."""
    offset = 0
    for line_no, data in enumerate(raw, start=1):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield line_no, _not_utf8(line_no, data, exc, offset)
        else:
            if line_no == 1:
                text = text.removeprefix(_BOM)
            if text.strip():
                yield line_no, text
        offset += len(data)


def _not_utf8(line_no: int, data: bytes, exc: UnicodeDecodeError, offset: int) -> BadLine:
    byte = data[exc.start]
    return BadLine(f"not UTF-8 text: byte 0x{byte:02x} at offset {offset + exc.start} of the "
                   f"file (byte {exc.start + 1} of the line): {exc.reason}; save the file as "
                   "UTF-8", line_no=line_no)


def read_job_file(path: Path) -> Iterator[NumberedLine]:
    """The numbered lines of the job file at ``path`` (``decode_lines``).

    Raises:
        InputError: the file cannot be read (``check_job_file`` says so before any line).
    """
    check_job_file(path)
    with path.open("rb") as handle:
        yield from decode_lines(handle)


def check_job_file(path: Path) -> None:
    """Refuse a job file that cannot be used at all, with what to do.

    Raises:
        InputError: missing, a directory, unreadable, UTF-16, or no non-blank line.
    """
    shown = str(path)
    if path.is_dir():
        raise InputError(f"{shown!r} is a directory; give a JSONL job file (one decision per "
                         "line)")
    try:
        with path.open("rb") as handle:
            head = handle.read(2)
            handle.seek(0)
            content = has_content(handle)
    except OSError as exc:
        raise InputError(f"cannot read job file {shown!r}: {exc.strerror}") from exc
    if head in _UTF16_BOMS:
        raise InputError(f"{shown!r} is UTF-16 text (it starts with a UTF-16 byte order mark); "
                         "save it as UTF-8 and try again")
    if not content:
        raise InputError(f"{shown!r} has no decisions (the file is empty or only blank lines); "
                         "nothing was stored")


def has_content(raw: IO[bytes]) -> bool:
    """Whether ``raw`` holds anything but whitespace (reads only up to the first such byte)."""
    while chunk := raw.read(_PEEK):
        if chunk.strip() and chunk.strip() != _BOM.encode():
            return True
    return False
