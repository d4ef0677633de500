"""A server's error is shown by its JSON message, bounded to one line; any other body (a page,
another service at the URL) is described, never quoted: a URL a client names cannot read a page
back through a failure reason or an API answer."""

from __future__ import annotations

import orjson
import pytest

from app.errors import MalformedResponse
from app.upstream.http_errors import MESSAGE_CHARS, error_message, json_object

PAGE = b"<!DOCTYPE html><html><head><title>Flower</title></head><body>workers: w1@pod</body>"


def test_a_page_is_described_not_shown() -> None:
    page = b"<html><title>Flower</title><body>secret task list</body></html>"
    said = error_message(page)
    assert "Flower" not in said and "secret" not in said
    assert said == f"no error message: an HTML page of {len(page)} bytes, not the JSON expected"
    with pytest.raises(MalformedResponse) as err:
        json_object(page, "http://h:1")
    assert "secret" not in err.value.message
    with pytest.raises(MalformedResponse) as err:
        json_object(b'["secret"]', "http://h:1")
    assert "secret" not in err.value.message


def test_a_json_message_is_one_bounded_line() -> None:
    long = "line one\r\nforged: line\x1b[31m" + "x" * 1000
    said = error_message(orjson.dumps({"error": {"message": long}}))
    assert "\n" not in said and "\r" not in said and "\x1b" not in said
    assert len(said) == MESSAGE_CHARS and said.endswith("…")
    assert said.startswith("line one forged: line")
    assert error_message(b"") == "(empty body)"
    assert error_message(b'{"error": "Unauthorized"}') == "Unauthorized"


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
