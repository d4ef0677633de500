"""A decision's images in the request to a decision endpoint (``--answer-by``): vLLM's
``images`` field, OpenAI's ``input_image`` parts; a ``file://`` image sent as its bytes."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image

from app.engine import parse_decision
from app.engine.openai.client import decisions_request
from app.engine.systemone import systemone_request
from app.images import ImagePolicy
from app.runs.endpoint_images import endpoint_image_urls

URL = "https://images.example.com/parcel-17.jpg"
DATA = "data:image/png;base64,iVBORw0KGgo="


def _decision(*images: str, state: object = "A parcel.") -> object:
    return parse_decision({"id": "d", "state": state, "images": list(images), "questions": {
        "damage": {"type": "noul", "instructions": "Is it damaged?"}}})


def test_systemone_sends_the_images_in_vllms_field() -> None:
    body = systemone_request(_decision(URL, DATA), "dgemma")  # type: ignore[arg-type]
    assert body["images"] == [URL, DATA]
    assert "images" not in systemone_request(_decision(), "dgemma")  # type: ignore[arg-type]


def test_a_local_image_cannot_go_as_its_reference() -> None:
    with pytest.raises(ValueError, match="pass its bytes as a data URL"):
        systemone_request(_decision("file:///srv/img/a.png"), "dgemma")  # type: ignore[arg-type]


def test_decisions_sends_openais_input_image_parts_before_the_text() -> None:
    body = decisions_request(_decision(URL), "gpt-6-luna")  # type: ignore[arg-type]
    assert body["input"] == [{"role": "user", "content": [
        {"type": "input_image", "image_url": URL}, {"type": "input_text", "text": "A parcel."}]}]
    alone = decisions_request(_decision(URL, state=None), "m")  # type: ignore[arg-type]
    assert alone["input"][0]["content"] == [{"type": "input_image", "image_url": URL}]


async def test_a_file_image_goes_as_the_data_url_of_its_bytes(tmp_path: Path) -> None:
    out = io.BytesIO()
    Image.new("RGB", (8, 6), (1, 2, 3)).save(out, format="PNG")
    (tmp_path / "a.png").write_bytes(out.getvalue())
    ref = (tmp_path / "a.png").as_uri()
    policy = ImagePolicy(allowed_dirs=(tmp_path.resolve(),))
    urls = await endpoint_image_urls((URL, ref, DATA), policy)
    assert urls[0] == URL and urls[2] == DATA
    assert urls[1] == "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
