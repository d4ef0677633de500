"""What a stored text may hold: the checks every entry point makes before anything is stored."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine import parse_decision
from app.engine.limits import MAX_JSON_DEPTH, check_json, check_run_name
from app.errors import BadLine, InputError

NOUL = {"type": "noul", "instructions": "Lawful?"}


def _nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"k": [value]} if levels % 2 else [value]
    return value


def test_any_depth_is_checked_without_recursion() -> None:
    with pytest.raises(InputError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        check_json("'state'", _nested(200_000))  # far past Python's recursion limit


def test_the_deepest_allowed_value_passes() -> None:
    check_json("'state'", _nested(MAX_JSON_DEPTH))
    with pytest.raises(InputError):
        check_json("'state'", _nested(MAX_JSON_DEPTH + 1))


@pytest.mark.parametrize("value", ["a\x00", {"k\x00": 1}, [["ok", {"k": "\x00"}]]])
def test_a_nul_anywhere_is_refused(value: Any) -> None:
    with pytest.raises(InputError, match=r"holds a NUL character \(\\u0000\)"):
        check_json("'state'", value)


@pytest.mark.parametrize(("line", "says"), [
    ({"id": "d\x00"}, "decision id 'd\\x00' holds a NUL character"),
    ({"id": 7, "cell": "c" * 201}, "decision '7': 'cell' is 201 characters long; the limit is"),
    ({"id": "i" * 501}, "is 501 characters long; the limit is 500, shorten it"),
    ({"id": "d", "questions": {"q" * 501: NOUL}}, "decision 'd': question id 'qqq"),
    ({"id": "d", "expected": {"ok": "yes\x00"}}, "'expected' holds a NUL character"),
    ({"id": "d", "images": ["file:///a\x00.png"]}, "'images'[0] holds a NUL character"),
])
def test_a_line_no_database_stores_is_a_bad_line_with_one_reason(line: dict[str, Any],
                                                                   says: str) -> None:
    obj = {"state": "s", "questions": {"ok": NOUL}, **line}
    with pytest.raises(BadLine) as caught:
        parse_decision(obj, line_no=3)
    assert says in caught.value.reason and "\n" not in caught.value.reason


def test_ids_and_cells_at_their_limits_are_kept() -> None:
    decision = parse_decision({"id": "i" * 500, "cell": "c" * 200, "state": "s",
                               "questions": {"q" * 500: NOUL}})
    assert len(decision.id) == 500 and decision.cell == "c" * 200


@pytest.mark.parametrize(("name", "says"), [
    ("", "non-empty"), ("a\nb", "control character"), ("a\tb", "control character"),
    ("a\x85b", "control character"), ("a/b", "'/' or '..'"), ("..", "'/' or '..'"),
    ("a\x00", "NUL character"), ("n" * 201, "201 characters long; the limit is 200"),
    ("a\udcff", "not UTF-8 text")])  # a byte of argv that is not UTF-8
def test_a_run_name_outside_the_rules_is_refused(name: str, says: str) -> None:
    with pytest.raises(InputError, match=says):
        check_run_name(name)


@pytest.mark.parametrize("name", ["contracts", "€ 2026-12 v1.2", "n" * 200, "a.b"])
def test_a_printable_name_is_taken_as_given(name: str) -> None:
    assert check_run_name(name) == name
