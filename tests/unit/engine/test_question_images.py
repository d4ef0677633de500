"""A job line's ``images``: parsed (form only) into ``Decision.images``, stored with the records
checked at submit, given back from the payload; the content hash covers their sha256."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine import content_digest, decision_from_payload, decision_payload, parse_decision
from app.errors import BadLine, InputError

QUESTIONS = {"kind": {"type": "choice", "criteria": {"bar": None, "pie": None}}}
PNG = "data:image/png;base64,iVBORw0KGgo="


def _line(**extra: Any) -> dict[str, Any]:
    return {"id": "d1", "state": "Figure 1.", "questions": QUESTIONS, **extra}


def test_images_parse_in_order_for_both_line_shapes() -> None:
    refs = ["https://example.org/a.png", "file:///data/b.png", PNG]
    assert parse_decision(_line(images=refs)).images == tuple(refs)
    batch = {"custom_id": "d2", "body": {"state": "x", "questions": QUESTIONS,
                                         "images": refs[:1]}}
    assert parse_decision(batch).images == tuple(refs[:1])
    assert parse_decision(_line()).images == ()


def test_a_decision_with_images_may_have_a_null_state() -> None:
    decision = parse_decision(_line(state=None, images=[PNG]))
    assert decision.state is None
    with pytest.raises(InputError, match=r"missing 'state'.*only for a decision with 'images'"):
        parse_decision(_line(state=None))


@pytest.mark.parametrize(("images", "match"), [
    (["ftp://example.org/a.png"], r"'images'\[0\] .* is not an http\(s\), file:// or data:"),
    ([PNG, 3], r"'images'\[1\] must be a URL string"),
    ({"url": PNG}, "'images' must be a list"),
    ([""], r"'images'\[0\] must be a URL string"),
])
def test_malformed_images_are_a_bad_line(images: Any, match: str) -> None:
    with pytest.raises(BadLine, match=match):
        parse_decision(_line(images=images), line_no=4)


def test_a_misspelt_images_field_is_named() -> None:
    with pytest.raises(InputError, match="'image' \\(did you mean 'images'\\?\\)"):
        parse_decision(_line(image=[PNG]))


def test_the_payload_keeps_the_records_and_gives_the_refs_back() -> None:
    decision = parse_decision(_line(images=["https://example.org/a.png", PNG]))
    records = [{"ref": "https://example.org/a.png", "sha256": "a" * 64,
                "media_type": "image/png", "width": 4, "height": 3, "bytes": 90},
               {"ref": PNG, "sha256": "b" * 64, "media_type": "image/png", "width": 1,
                "height": 1, "bytes": 8}]
    payload = decision_payload(decision, images=records)
    assert payload["images"] == records
    assert decision_from_payload("d1", None, payload) == decision
    bare = decision_payload(decision)
    assert bare["images"] == [{"ref": "https://example.org/a.png"}, {"ref": PNG}]
    assert decision_from_payload("d1", None, bare).images == decision.images
    with pytest.raises(ValueError, match="do not match"):
        decision_payload(decision, images=records[:1])


def test_the_content_hash_covers_each_image_sha256() -> None:
    decision = parse_decision(_line(images=["https://example.org/a.png"]))
    record = {"ref": "https://example.org/a.png", "sha256": "a" * 64, "media_type": "image/png",
              "width": 4, "height": 3, "bytes": 90}
    same = content_digest(None, decision_payload(decision, images=[record]))
    assert same == content_digest(None, decision_payload(decision, images=[dict(record)]))
    changed = content_digest(None, decision_payload(decision, images=[{**record,
                                                                        "sha256": "c" * 64}]))
    assert changed != same
    text = parse_decision(_line())
    assert "images" not in decision_payload(text)
