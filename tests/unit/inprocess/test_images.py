"""Reads with images on the tiny model: against transformers' own forward with pixel values,
the image changing the answer, the prompt cache keyed by the images, the vision tower run once
per prompt, and the image encoder loaded from the checkpoint at the first image read."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from app.engine import DecisionFlow, ReadSettings, parse_decision, plan_decision  # noqa: E402
from app.errors import ConfigError, UpstreamRejected  # noqa: E402
from app.inprocess import ReadModel, load_model  # noqa: E402
from app.inprocess.executor import BatchExecutor, ReadJob  # noqa: E402
from app.inprocess.images import (  # noqa: E402
    ImageInputs,
    ImagePreparer,
    image_urls,
    load_image_processor,
)
from app.inprocess.model import DecodeRow, ImagePrefill, PrefillJob  # noqa: E402
from app.inprocess.prefill_cache import PrefillCache  # noqa: E402
from tests.fixtures.tiny_model import png_data_url, with_image_parts  # noqa: E402
from tests.fixtures.tokens import random_ids  # noqa: E402

pytestmark = pytest.mark.engine

ATOL = 1e-5
IDS = (3, 7, 11, 106)
SLOTS = (2, 5)
CANVAS = random_ids(16, 4, 800)
TEXT = tuple(range(300, 312))  #: no image token among them
RED, BLUE = (200, 30, 30), (30, 30, 200)


@pytest.fixture(scope="module")
def preparer() -> ImagePreparer:
    return ImagePreparer(load_image_processor(None))


def _prompt(model: ReadModel, images: ImageInputs) -> tuple[int, ...]:
    """bos, a few ids, each image as the processor expands it, then text."""
    config = model.model.config
    ids: list[int] = [2, 105, 10]
    for n in images.soft_tokens:
        ids += [config.boi_token_id, *[config.image_token_id] * n, config.eoi_token_id]
    return (*ids, *TEXT)


def _read(model: ReadModel, prompt: tuple[int, ...], images: ImageInputs) -> Any:
    entry = model.prefill_images([ImagePrefill(prompt, images)])[0]
    return model.decode([DecodeRow(entry, CANVAS, SLOTS, IDS)])[0]


def _reference(model: ReadModel, prompt: tuple[int, ...], images: ImageInputs, *,
               vision_tokens_both_ways: bool = True) -> Any:
    """transformers' own forward: prompt ids, pixel values and the image tokens' types (the
    bidirectional mask over each image), the canvas; log-probs at the slots."""
    ids = torch.tensor([prompt])
    types = (ids == model.model.config.image_token_id).long()
    with torch.no_grad():
        logits = model.model(input_ids=ids, pixel_values=images.pixel_values,
                             image_position_ids=images.position_ids,
                             mm_token_type_ids=types if vision_tokens_both_ways else None,
                             decoder_input_ids=torch.tensor([CANVAS])).logits
    return torch.log_softmax(logits[0, list(SLOTS)], dim=-1)[:, list(IDS)]


@pytest.mark.parametrize("colors", [(RED,), (RED, BLUE)], ids=["one image", "two images"])
def test_image_read_equals_transformers_forward(tiny_read_model: ReadModel,
                                                preparer: ImagePreparer,
                                                colors: tuple[tuple[int, int, int], ...]) -> None:
    images = preparer.prepare([png_data_url(c) for c in colors])
    prompt = _prompt(tiny_read_model, images)
    result = _read(tiny_read_model, prompt, images)
    reference = _reference(tiny_read_model, prompt, images)
    assert torch.allclose(result.logprobs, reference, atol=ATOL)
    # the image tokens attend to one another both ways: a causal encoding reads otherwise
    causal = _reference(tiny_read_model, prompt, images, vision_tokens_both_ways=False)
    assert not torch.allclose(result.logprobs, causal, atol=1e-4)


def test_the_image_changes_the_answer(tiny_read_model: ReadModel,
                                      preparer: ImagePreparer) -> None:
    red = preparer.prepare([png_data_url(RED)])
    blue = preparer.prepare([png_data_url(BLUE)])
    prompt = _prompt(tiny_read_model, red)
    assert prompt == _prompt(tiny_read_model, blue)  # same size: the same placeholder ids
    red_read, blue_read = (_read(tiny_read_model, prompt, i) for i in (red, blue))
    assert not torch.allclose(red_read.logprobs, blue_read.logprobs, atol=1e-4)
    again = _read(tiny_read_model, prompt, preparer.prepare([png_data_url(RED)]))
    assert torch.equal(again.logprobs, red_read.logprobs)


def test_the_prompt_cache_keys_prompts_by_their_images(tiny_read_model: ReadModel,
                                                       preparer: ImagePreparer,
                                                       tower_calls: Any) -> None:
    """Two decisions with the same ids and different images share no entry; draws of one
    decision share theirs, and the vision tower runs once per prompt, not once per draw."""
    green = preparer.prepare([png_data_url((30, 200, 30))])
    gray = preparer.prepare([png_data_url((120, 120, 120))])
    prompt = _prompt(tiny_read_model, green)
    executor = BatchExecutor(tiny_read_model, PrefillCache(64 << 20), prefill_token_budget=4096,
                             decode_batch=8)
    towers = tower_calls

    def job(images: ImageInputs | None, canvas: tuple[int, ...] = CANVAS) -> ReadJob:
        return ReadJob(prompt, canvas, SLOTS, IDS, images=images)

    draws = [job(green, random_ids(16, 20 + k, 800)) for k in range(3)]
    first = executor.run([*draws, job(gray), job(None)])
    assert towers() == 2 and executor.last.encoder_calls == 3  # two image prompts, one text
    assert len(executor.cache) == 3
    green_read, gray_read, text_read = first[0], first[3], first[4]
    assert green_read.rows[2].logprobs != gray_read.rows[2].logprobs
    assert text_read.rows[2].logprobs != green_read.rows[2].logprobs
    alone = tiny_read_model.decode([DecodeRow(tiny_read_model.prefill(
        [PrefillJob(None, prompt)])[0], CANVAS, SLOTS, IDS)])[0]
    assert list(text_read.rows[2].logprobs.values()) == pytest.approx(
        alone.logprobs[0].tolist(), abs=ATOL)  # the text read is the text read alone
    second = executor.run([job(green, random_ids(16, 30, 800)), job(gray)])
    assert towers() == 2 and executor.last.encoder_calls == 0
    assert second[1].rows[2].logprobs == pytest.approx(gray_read.rows[2].logprobs, abs=ATOL)
    assert [o.cached_tokens for o in second] == [len(prompt)] * 2


def test_image_parts_are_read_in_order() -> None:
    messages = [{"role": "system", "content": "q"},
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:a"}},
                    {"type": "image_url", "image_url": {"url": "data:b"}},
                    {"type": "text", "text": "state"}]}]
    assert image_urls(messages) == ("data:a", "data:b")
    assert image_urls([{"role": "user", "content": "text only"}]) == ()


@pytest.mark.parametrize(("url", "says"), [
    ("https://example.com/cat.png", "base64 data URLs"),
    ("data:image/png;base64,@@@", "does not decode"),
    ("data:image/png;base64,aGVsbG8=", "not an image pillow can read"),
])
def test_an_image_the_engine_cannot_read_is_rejected(preparer: ImagePreparer, url: str,
                                                     says: str) -> None:
    with pytest.raises(UpstreamRejected, match=says) as raised:
        preparer.prepare([png_data_url(RED), url])
    assert "image 2" in str(raised.value)


def test_the_image_encoder_is_loaded_at_the_first_image_read(tiny_model_dir: Any,
                                                             tiny_read_model: ReadModel,
                                                             preparer: ImagePreparer) -> None:
    """A checkpoint is loaded without its image encoder; the first image read reads it from
    the checkpoint, and it is the encoder the model was saved with."""
    model = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    assert not model.vision.loaded
    images = preparer.prepare([png_data_url((10, 160, 90))])
    features = model.vision.features(images)
    assert model.vision.loaded
    assert torch.equal(features, tiny_read_model.vision.features(images))


def test_a_model_without_its_image_encoder_cannot_read_images(preparer: ImagePreparer) -> None:
    from app.inprocess import build_tiny_model
    from app.inprocess.fp8_load import drop_vision

    model = build_tiny_model(832)
    drop_vision(model)
    with pytest.raises(ConfigError, match="cannot read images"):
        ReadModel(model).vision.features(preparer.prepare([png_data_url(RED)]))


@pytest.fixture
def tower_calls(tiny_read_model: ReadModel) -> Iterator[Callable[[], int]]:
    """How many times the tiny model's vision tower has run since the test began."""
    calls = [0]

    def hook(*_: Any) -> None:
        calls[0] += 1

    handle = tiny_read_model.model.model.encoder.vision_tower.register_forward_hook(hook)
    yield lambda: calls[0]
    handle.remove()


def test_an_fp8_checkpoint_reads_images_with_its_bf16_image_encoder(
        tmp_path_factory: pytest.TempPathFactory, preparer: ImagePreparer) -> None:
    """llm-compressor leaves the vision tower unquantized: the first image read loads it from
    the FP8 checkpoint, in bf16, as the model was before quantization."""
    from app.inprocess import build_tiny_model
    from tests.unit.inprocess.fp8_checkpoint import make_fp8_dir

    fp8 = load_model(str(make_fp8_dir(tmp_path_factory.mktemp("fp8-images"))), device="cpu")
    before = build_tiny_model(832, layers=3, seed=3).to(torch.bfloat16).model.encoder
    red, blue = (preparer.prepare([png_data_url(c)]) for c in (RED, BLUE))
    assert not fp8.vision.loaded
    fp8.vision.features(red)
    encoder = fp8.model.model.encoder
    for name in ("vision_tower", "embed_vision"):
        loaded = dict(getattr(encoder, name).named_parameters())
        saved = dict(getattr(before, name).named_parameters())
        assert loaded.keys() == saved.keys()
        assert all(loaded[k].dtype == torch.bfloat16 and torch.equal(loaded[k], saved[k])
                   for k in saved)
    prompt = _prompt(fp8, red)
    assert not torch.allclose(_read(fp8, prompt, red).logprobs, _read(fp8, prompt, blue).logprobs,
                              atol=1e-3)


def _chat_request(tokenizer: Any, *urls: str) -> Any:
    """Draw 0 of a decision's read, its user turn given ``urls`` before the text."""
    settings = ReadSettings()
    line = {"id": "d1", "state": "Is it damaged?",
            "questions": {"damaged": {"type": "noul", "instructions": "Is it damaged?"}}}
    plan = plan_decision(parse_decision(line, line_no=1), settings, tokenizer)
    request = DecisionFlow(plan, settings, vocab_size=832).next_requests()[0]
    return with_image_parts(request, tuple(urls)) if urls else request


@pytest.mark.parametrize(("size", "says"), [
    ((4000, 16), "too elongated for this model's vision tower"),
    (None, "base64 data URLs"),
])
def test_a_read_with_an_image_the_engine_cannot_read_is_rejected(
        tiny_upstream: Any, standin_tokenizer: Any, size: tuple[int, int] | None,
        says: str) -> None:
    """Refused as vLLM refuses a bad request (the decision rejected, the run going on)."""
    url = png_data_url(RED, size) if size else "https://example.com/a.png"
    with pytest.raises(UpstreamRejected, match=says) as raised:
        asyncio.run(tiny_upstream.read(_chat_request(standin_tokenizer, url)))
    assert raised.value.status == 400


def test_text_reads_never_load_the_image_encoder(tiny_model_dir: Any) -> None:
    from app.inprocess import TransformersUpstream
    from app.tokenizer.hf import load_tokenizer

    model = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    tokenizer = load_tokenizer(str(tiny_model_dir))
    upstream = TransformersUpstream(str(tiny_model_dir), tokenizer=tokenizer, model=model)
    try:
        result = asyncio.run(upstream.read(_chat_request(tokenizer)))
    finally:
        upstream.batcher.close()
    assert result.rows and not model.vision.loaded
    assert model.model.model.encoder.vision_tower is None
