"""What a stored text may hold: the limits every entry point checks before anything is read
or written, so a bad line is refused with the same reason on SQLite and PostgreSQL.

- No NUL character (``\\u0000``) in any text (PostgreSQL's text cannot hold it).
- Decision ids and question ids at most ``MAX_ID_CHARS``, cells ``MAX_CELL_CHARS``, run
  names ``MAX_RUN_NAME_CHARS`` (the columns' sizes).
- JSON (states, criteria, instructions, expected values) nested at most ``MAX_JSON_DEPTH``
  levels, checked without recursion.
- Run names: no control characters (a CR or LF would forge log lines), no ``/`` and no ``..``
  (a name is a URL path segment of ``/v1/runs/NAME``).
"""

from __future__ import annotations

from typing import Any

from app.errors import InputError

__all__ = ["MAX_CELL_CHARS", "MAX_ID_CHARS", "MAX_JSON_DEPTH", "MAX_RUN_NAME_CHARS",
           "check_json", "check_run_name", "check_text"]

#: Decision ids and question ids (``decisions.key``, ``answers.question_id``: 500).
MAX_ID_CHARS = 500
#: Cells (``decisions.cell``: 200).
MAX_CELL_CHARS = 200
#: Run names (``runs.name``: 200).
MAX_RUN_NAME_CHARS = 200
#: JSON values nest at most this deep (the JSON encoder stops at 255 levels).
MAX_JSON_DEPTH = 64

_NUL = "\x00"


def _nul_message(what: str) -> str:
    return f"{what} holds a NUL character (\\u0000), which no database stores; remove it"


def check_text(what: str, value: str, max_chars: int) -> str:
    """``value`` when it has no NUL, at most ``max_chars`` characters and encodes as UTF-8.

    Raises:
        InputError: ``what`` named, with the limit.
    """
    if _NUL in value:
        raise InputError(_nul_message(what))
    if len(value) > max_chars:
        raise InputError(f"{what} is {len(value):,} characters long; the limit is "
                         f"{max_chars}, shorten it")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{what} is not UTF-8 text (bytes that are not UTF-8, or a lone "
                             "surrogate); write it as UTF-8") from None
    return value


def check_json(what: str, value: Any) -> None:
    """Refuse a JSON value (as parsed) with a NUL character in any key or string, or nested
    deeper than ``MAX_JSON_DEPTH`` levels. Iterative: any depth is checked without recursion.

    Raises:
        InputError: ``what`` named, with what to do.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _NUL in item:
                raise InputError(_nul_message(what))
        elif isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise InputError(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels; "
                                 "flatten it")
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)


def check_run_name(name: Any) -> str:
    """A run name that can be stored and addressed: 1 to ``MAX_RUN_NAME_CHARS`` characters,
    no control character, no ``/``, no ``..``. The CLI and the API check names here.

    Raises:
        InputError: what is wrong and what a name may hold.
    """
    if not isinstance(name, str) or not name.strip():
        raise InputError("a run name must be a non-empty text")
    shown = repr(name[:60]) + ("…" if len(name) > 60 else "")
    check_text(f"run name {shown}", name, MAX_RUN_NAME_CHARS)
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
        raise InputError(f"run name {shown} holds a control character (a newline, tab, ...); "
                         "give a name of printable characters")
    if "/" in name or ".." in name:
        raise InputError(f"run name {shown} holds '/' or '..', which a URL cannot address; "
                         "give a name without them")
    return name
