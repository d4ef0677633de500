"""TransformersUpstream answering chat reads whose user turn carries images (vLLM's reader's
layout: the image parts first, then the text), on the tiny model saved with its tokenizer."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from app.engine import DecisionFlow, ReadSettings, parse_decision, plan_decision
from app.engine.types import ReadRequest
from app.errors import UpstreamRejected
from app.inprocess import TransformersUpstream, load_model
from app.tokenizer.hf import load_tokenizer
from tests.fixtures.tiny_model import png_data_url, with_image_parts

pytestmark = pytest.mark.engine

LINE = {"id": "d1", "state": "Is the object in the picture damaged?",
        "questions": {"damaged": {"type": "noul", "instructions": "Is it damaged?"}}}
RED, BLUE = (200, 30, 30), (30, 30, 200)


@pytest.fixture
def upstream(tiny_model_dir: Path) -> Iterator[TransformersUpstream]:
    upstream = _upstream(tiny_model_dir, tiny_model_dir)
    yield upstream
    upstream.batcher.close()


def _upstream(model_dir: Path, tokenizer_dir: Path) -> TransformersUpstream:
    model = load_model(str(model_dir), device="cpu", dtype="float32")
    return TransformersUpstream(str(model_dir), tokenizer=load_tokenizer(str(tokenizer_dir)),
                                model=model, flush_ms=1.0)


def _request(upstream: TransformersUpstream, *urls: str) -> ReadRequest:
    """Draw 0 of the decision's first read, its user turn given ``urls`` before the text."""
    settings = ReadSettings()
    plan = plan_decision(parse_decision(LINE, line_no=1), settings, upstream.tokenizer)
    request = DecisionFlow(plan, settings, vocab_size=upstream.model.vocab_size).next_requests()[0]
    return with_image_parts(request, tuple(urls)) if urls else request


def _read(upstream: TransformersUpstream, request: ReadRequest) -> Any:
    return asyncio.run(upstream.read(request))


def _logprobs(result: Any) -> list[float]:
    return [p for row in result.rows.values() for p in row.logprobs.values()]


def test_the_image_changes_the_answer(upstream: TransformersUpstream) -> None:
    assert not upstream.model.vision.loaded  # text runs never load the image encoder
    red = _read(upstream, _request(upstream, png_data_url(RED)))
    assert upstream.model.vision.loaded
    blue = _read(upstream, _request(upstream, png_data_url(BLUE)))
    text = _read(upstream, _request(upstream))
    assert _logprobs(red) != pytest.approx(_logprobs(blue), abs=1e-4)
    assert _logprobs(text) != pytest.approx(_logprobs(red), abs=1e-4)
    assert red.prompt_tokens == blue.prompt_tokens > text.prompt_tokens + 200
    again = _read(upstream, _request(upstream, png_data_url(RED)))
    assert _logprobs(again) == _logprobs(red)
    assert again.cached_tokens == again.prompt_tokens  # the decision's prompt, images and all


def test_two_images_read_in_order(upstream: TransformersUpstream) -> None:
    red_blue = _read(upstream, _request(upstream, png_data_url(RED), png_data_url(BLUE)))
    blue_red = _read(upstream, _request(upstream, png_data_url(BLUE), png_data_url(RED)))
    assert _logprobs(red_blue) != pytest.approx(_logprobs(blue_red), abs=1e-4)


def test_an_image_that_is_not_one_is_rejected(upstream: TransformersUpstream) -> None:
    with pytest.raises(UpstreamRejected, match="not an image pillow can read"):
        _read(upstream, _request(upstream, "data:image/png;base64,aGVsbG8="))


def test_a_prompt_whose_image_tokens_do_not_match_the_processor_is_rejected(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    """A model whose image processor makes 70 soft tokens at most, read with a tokenizer that
    counts Gemma 4's default 280."""
    model_dir = Path(shutil.copytree(tiny_model_dir, tmp_path / "tiny-70"))
    (model_dir / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "Gemma4ImageProcessorPil", "max_soft_tokens": 70}))
    upstream = _upstream(model_dir, tiny_model_dir)
    try:
        with pytest.raises(UpstreamRejected, match=r"image tokens .* features"):
            _read(upstream, _request(upstream, png_data_url(RED)))
    finally:
        upstream.batcher.close()
