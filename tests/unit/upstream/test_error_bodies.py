"""An error from a server that is not the one expected (a page, another service at the URL) is
described, never quoted: its text cannot reach a run's failure reason or an API answer."""

from __future__ import annotations

import pytest

from app.errors import MalformedResponse
from app.upstream.http_errors import error_message, json_object

PAGE = b"<!DOCTYPE html><html><head><title>Flower</title></head><body>workers: w1@pod</body>"


def test_a_json_error_message_is_kept() -> None:
    assert error_message(b'{"error": {"message": "bad seed"}}') == "bad seed"


def test_an_html_page_is_described_not_quoted() -> None:
    message = error_message(PAGE)
    assert message == f"no error message: an HTML page of {len(PAGE)} bytes, not the JSON expected"
    assert "Flower" not in message and "w1@pod" not in message


def test_a_200_page_is_malformed_without_its_text() -> None:
    with pytest.raises(MalformedResponse) as caught:
        json_object(PAGE, "the decision endpoint")
    assert "Flower" not in caught.value.message
    assert caught.value.message.startswith("the decision endpoint answered no JSON: an HTML page")
