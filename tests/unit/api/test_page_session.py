"""The run pages' login never sends a browser to another site, and its cookie is bound to the
API key."""

from __future__ import annotations

import pytest

from app.api.session import safe_next, session_token


@pytest.mark.parametrize(("target", "expected"), [
    ("/runs/eval-1", "/runs/eval-1"),
    ("/runs/eval-1?x=1", "/runs/eval-1?x=1"),
    (None, "/runs"),
    ("", "/runs"),
    ("https://evil.example/", "/runs"),
    ("//evil.example/path", "/runs"),
    ("/\\evil.example", "/runs"),
    ("runs/x", "/runs"),
])
def test_safe_next(target: str | None, expected: str) -> None:
    assert safe_next(target) == expected


def test_the_session_token_changes_with_the_key() -> None:
    assert session_token("key-one") == session_token("key-one")
    assert session_token("key-one") != session_token("key-two")
    assert "key-one" not in session_token("key-one")
