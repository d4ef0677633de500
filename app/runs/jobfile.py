"""Job files: bytes in, numbered lines out, each line a decision or a bad line with its reason.

    bytes --decode_lines--> (line number, text) --iter_job_lines--> decision | LineProblem

A line that is not UTF-8, not JSON or not a decision is a bad line like any other (its number
and the reason), not the end of the file: the good lines around it are kept. Problems of the
whole file (missing, a directory, unreadable, empty, UTF-16) are an ``InputError`` raised
before anything is written. The CLI and the API read job files the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from app.engine import Decision, QuestionsMemo, line_id, parse_decision
from app.engine.limits import MAX_JSON_DEPTH
from app.errors import BadLine, InputError
from app.runs.line_limit import MAX_LINE_BYTES, Overlong, bounded_lines

__all__ = ["LineProblem", "NumberedLine", "ParsedJob", "bounded_memo", "check_job_file",
           "decode_lines", "duplicate_reason", "has_content", "iter_job_lines",
           "parse_job_lines", "read_job_file", "split_lines"]

#: ``(line number, text)``, or ``(line number, BadLine)`` for a line that is not UTF-8.
NumberedLine = tuple[int, "str | BadLine"]
_BOM = "\ufeff"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_PEEK = 64 * 1024

#: Distinct question sets remembered while a file is read (parsed, planned, stored specs): a
#: file asks a few sets of many states; one asking a new set on every line stays flat.
MEMO_SETS = 4096


def bounded_memo(memo: dict[Any, Any]) -> dict[Any, Any]:
    """``memo``, emptied once it holds ``MEMO_SETS`` entries (memory stays flat)."""
    if len(memo) >= MEMO_SETS:
        memo.clear()
    return memo



def decode_lines(raw: Iterable[bytes], *, max_line_bytes: int = MAX_LINE_BYTES
                 ) -> Iterator[NumberedLine]:
    """Every non-blank line of ``raw`` (a binary file, or any iterable of lines), numbered from
    1; an undecodable line, or one of a file over ``MAX_LINE_BYTES``, comes as a ``BadLine``
    saying where and why."""
    offset = 0
    lines = (bounded_lines(raw, max_line_bytes)  # type: ignore[arg-type]
             if hasattr(raw, "readline") else raw)
    for line_no, data in enumerate(lines, start=1):
        if isinstance(data, Overlong):
            yield line_no, BadLine(f"{data:,} bytes, over the limit of {max_line_bytes:,} "
                                   "per line; split the decision or send its images as URLs",
                                   line_no=line_no)
            offset += data
            continue
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


@dataclass(frozen=True)
class LineProblem:
    """A line that was refused (bad) or a decision stored as rejected, with the reason."""

    line_no: int
    key: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line_no, "id": self.key, "reason": self.reason}


@dataclass
class ParsedJob:
    decisions: list[tuple[int, Decision]] = field(default_factory=list)
    bad: list[LineProblem] = field(default_factory=list)
    lines: int = 0


def iter_job_lines(lines: Iterable[NumberedLine]
                   ) -> Iterator[tuple[int, Decision | LineProblem]]:
    """Parse line by line: (line number, decision or the problem of a bad line). Duplicate
    ids are found where the decisions are written (``submit_job``), not here."""
    memo: QuestionsMemo = {}
    for line_no, text in lines:
        obj: Any = None
        try:
            obj = _load_line(line_no, text)
            yield line_no, _parse_line(line_no, obj, bounded_memo(memo))
        except BadLine as exc:
            yield line_no, LineProblem(line_no, line_id(obj), exc.reason)


def parse_job_lines(lines: Iterable[NumberedLine]) -> ParsedJob:
    """Parse every line into memory; bad ones (not JSON, not a decision, duplicate id) are
    collected. For small inputs; ``submit_job`` streams instead."""
    return split_lines(iter_job_lines(lines))


def split_lines(items: Iterable[tuple[int, Decision | LineProblem]]) -> ParsedJob:
    """Decisions (the first line of each id) and problems (bad lines, repeated ids)."""
    job = ParsedJob()
    first_seen: dict[str, int] = {}
    for line_no, item in items:
        job.lines += 1
        if isinstance(item, LineProblem):
            job.bad.append(item)
        elif item.id in first_seen:
            first = first_seen[item.id]
            job.bad.append(LineProblem(line_no, item.id, duplicate_reason(item.id, first)))
        else:
            first_seen[item.id] = line_no
            job.decisions.append((line_no, item))
    return job


def duplicate_reason(key: str, first_line: int | None) -> str:
    """Why a repeated id is a bad line."""
    return f"duplicate id {key!r} (first on line {first_line})"


def _load_line(line_no: int, text: str | BadLine) -> dict[str, Any]:
    """The JSON object of a line."""
    if isinstance(text, BadLine):  # not UTF-8 (decode_lines)
        raise text
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise BadLine(f"the line is nested deeper than {MAX_JSON_DEPTH} levels; flatten it",
                          line_no=line_no) from exc
        raise BadLine(f"not valid JSON ({exc})", line_no=line_no) from exc
    if not isinstance(obj, dict):
        raise BadLine(f"a line must be a JSON object, got {type(obj).__name__}", line_no=line_no)
    return obj


def _parse_line(line_no: int, obj: dict[str, Any], memo: QuestionsMemo) -> Decision:
    try:
        return parse_decision(obj, line_no=line_no, memo=memo)
    except BadLine:
        raise
    except InputError as exc:
        raise BadLine(exc.message, line_no=line_no) from exc
