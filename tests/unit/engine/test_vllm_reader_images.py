"""Image decisions under the vllm layout are vLLM 0.33's own reads, token for token.

``vllm_image_reads`` builds, from the protocol's facts and with transformers itself (the Hugging
Face tokenizer, chat template and Gemma 4 image processor; not dreads' adapter), what vLLM's
``/v1/systemone`` reader runs for a state, its questions and its images:

- the user turn is the image parts first, then the text. The approx chat template does not loop
  over a message's content, so vLLM hands it one string: one ``<|image|>`` per image, each on
  its own line, then the text (vLLM's "string" content format);
- the rendered prompt is tokenized, and each ``<|image|>`` id becomes ``<|image>``, N x
  ``<|image|>``, ``<image|>``, N the soft tokens Gemma 4's image processor makes of the image;
- the thought block follows; the noise of the slots is drawn from those prompt ids.

The tokenizer is the approx one (Gemma's real vocabulary) with Gemma 4's image tokens named at
DiffusionGemma's ids (255999, 258880, 258882), as the served model's tokenizer has them.
dreads' draw 0 must send the same prompt ids, canvas, width, ``max_tokens`` and logprob ids,
with that tokenizer and with the approx one as shipped (its ids at those places unnamed).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from app.engine import (
    Decision,
    DecisionFlow,
    Endpoint,
    Layout,
    PolicyName,
    ReadMode,
    ReadRequest,
    ReadSettings,
    encode_body,
    parse_decision,
    plan_decision,
)
from app.engine.template import ImagesNeedChat, ImagesNeedVllmLayout, PromptTooLong
from app.engine.types import ImageData
from app.engine.vllm_reader import joint_spans
from app.tokenizer.hf import HFTextTokenizer, load_tokenizer
from tests.fixtures.tokenizer import APPROX
from tests.unit.engine.test_vllm_reader import (
    STATE,
    THOUGHT,
    _body,
    _labels,
    _next_draw,
    _noise,
    choice,
    noul,
    score,
)

IMAGE_NAMES = {255999: "<|image>", 258880: "<|image|>", 258882: "<image|>"}


# -- the served model's tokenizer, and the images -------------------------------------------

@pytest.fixture(scope="module")
def named_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The approx tokenizer with Gemma 4's image tokens named at DiffusionGemma's ids."""
    if not (APPROX / "tokenizer.json").is_file():
        pytest.skip(f"the shared approx tokenizer is not at {APPROX}")
    out = tmp_path_factory.mktemp("named-approx")
    spec = json.loads((APPROX / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    for token, i in [(t, i) for t, i in vocab.items() if i in IMAGE_NAMES]:
        del vocab[token]
        vocab[IMAGE_NAMES[i]] = i
    for added in spec["added_tokens"]:
        if added["id"] in IMAGE_NAMES:
            added.update(content=IMAGE_NAMES[added["id"]], special=True)
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    config = json.loads((APPROX / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.update(boi_token="<|image>", image_token="<|image|>", eoi_token="<image|>")
    (out / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    shutil.copy(APPROX / "chat_template.jinja", out / "chat_template.jinja")
    return out


@pytest.fixture(scope="module")
def named_hf(named_dir: Path) -> Any:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(named_dir)
    assert hf.image_token_id == 258880
    return hf


@pytest.fixture(scope="module")
def named_tokenizer(named_hf: Any, named_dir: Path) -> HFTextTokenizer:
    return HFTextTokenizer(named_hf, "named-approx", source=str(named_dir))


def png(width: int, height: int, color: tuple[int, int, int]) -> tuple[Image.Image, ImageData]:
    """A generated PNG, as pillow reads it and as a fetched image (a data URL)."""
    image = Image.new("RGB", (width, height), color)
    image.putpixel((0, 0), (0, 0, 0))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    data = buffer.getvalue()
    url = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    fetched = ImageData(ref=url, url=url, sha256=hashlib.sha256(data).hexdigest(),
                        media_type="image/png", width=width, height=height)
    return Image.open(io.BytesIO(data)).convert("RGB"), fetched


RED = png(64, 40, (200, 30, 30))
TALL = png(30, 200, (20, 120, 220))
SQUARE = png(512, 512, (250, 250, 250))


# -- vLLM's reader, from the protocol's facts -----------------------------------------------

def _expand(hf: Any, ids: list[int], images: list[Image.Image]) -> list[int]:
    """Each ``<|image|>`` id as ``<|image>``, N x ``<|image|>``, ``<image|>``."""
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    counts = iter(Gemma4ImageProcessorPil()(images)["num_soft_tokens_per_image"]
                  if images else [])
    expanded: list[int] = []
    for token in ids:
        if token == hf.image_token_id:
            expanded += [hf.convert_tokens_to_ids(hf.boi_token),
                         *[hf.image_token_id] * next(counts),
                         hf.convert_tokens_to_ids(hf.eoi_token)]
        else:
            expanded.append(token)
    assert next(counts, None) is None
    return expanded


def _render(hf: Any, messages: list[dict[str, Any]], images: list[Image.Image],
            **options: Any) -> list[int]:
    assert "message['content'] +" in hf.chat_template  # no loop over content: "string" format
    (user, *rest) = messages
    content = "\n".join(["<|image|>"] * len(images) + [user["content"]])
    ids = hf.apply_chat_template([{"role": "user", "content": content}, *rest],
                                 enable_thinking=False, tokenize=True, return_dict=False,
                                 **options)
    return _expand(hf, list(ids), images)


def _prompt(hf: Any, text: str, images: list[Image.Image]) -> list[int]:
    return _render(hf, [{"role": "user", "content": text}], images, add_generation_prompt=True)


def _state(state: Any) -> str:
    return state if isinstance(state, str) else json.dumps(state, ensure_ascii=False)


def _isolated(hf: Any, state: Any, spec: dict[str, Any],
              images: list[Image.Image]) -> dict[str, Any]:
    encode = lambda text: hf.encode(text, add_special_tokens=False)  # noqa: E731
    ask = f"Question: {spec['instructions']}\n{_body(spec)}" if spec.get("instructions") \
        else _body(spec)
    prompt = _prompt(hf, f"{_state(state)}\n\n{ask}", images)
    label_ids = [encode(label)[0] for label in _labels(spec)]
    canvas = [_noise(prompt, 1, len(hf))[0], hf.convert_tokens_to_ids("<turn|>")]
    canvas += [hf.pad_token_id] * (16 - len(canvas))
    return {"prompt": prompt + encode(THOUGHT), "canvas": canvas, "width": 16,
            "logprob_ids": label_ids, "max_tokens": 2}


def _joint(hf: Any, state: Any, specs: list[dict[str, Any]], start: int,
           images: list[Image.Image]) -> dict[str, Any]:
    encode = lambda text: hf.encode(text, add_special_tokens=False)  # noqa: E731
    asks = [f"Question {k}: {s['instructions']}\n{_body(s)}" if s.get("instructions")
            else f"Question {k}:\n{_body(s)}" for k, s in enumerate(specs, start)]
    text = (f"{_state(state)}\n\n" + "\n\n".join(asks) + "\n\nReply with one line per "
            'question, in order, formatted as "number: answer".')
    prompt = _prompt(hf, text, images)
    noise = iter(_noise(prompt, len(specs), len(hf)))
    canvas: list[int] = []
    wanted: set[int] = set()
    for k, spec in enumerate(specs, start):
        labels = _labels(spec)
        canvas += encode(f"{k}: {labels[0]}")[:-1]
        for label in labels:
            wanted |= {encode(f"{k}: {label}")[-1], encode(label)[0]}
        last_slot = len(canvas)
        canvas += [next(noise), *encode("\n")]
    canvas.append(hf.convert_tokens_to_ids("<turn|>"))
    width = -(-(len(canvas) + 1) // 16) * 16
    canvas += [hf.pad_token_id] * (width - len(canvas))
    return {"prompt": prompt + encode(THOUGHT), "canvas": canvas, "width": width,
            "logprob_ids": sorted(wanted), "max_tokens": last_slot + 1}


def vllm_image_reads(hf: Any, state: Any, specs: list[dict[str, Any]],
                     images: list[Image.Image], *, joint: bool) -> list[dict[str, Any]]:
    """The reads vLLM's /v1/systemone runs for these questions about ``state`` and images."""
    if not joint or len(specs) == 1:
        return [_isolated(hf, state, spec, images) for spec in specs]
    rows = [len(hf.encode(f"{k}: {_labels(s)[0]}", add_special_tokens=False)[:-1]) + 2
            for k, s in enumerate(specs, 1)]
    return [_joint(hf, state, specs[a:b], a + 1, images) for a, b in joint_spans(rows, 320)]


# -- dreads' draw 0 -------------------------------------------------------------------------

def image_decision(state: Any, specs: list[dict[str, Any]],
                   images: list[ImageData]) -> Decision:
    base = parse_decision({"id": "d", "state": "x",
                           "questions": {f"x{i}": s for i, s in enumerate(specs)}})
    return Decision(id="d", state=state, questions=base.questions,
                    images=tuple(image.ref for image in images))


def dreads_image_reads(tok: HFTextTokenizer, state: Any, specs: list[dict[str, Any]],
                       images: list[ImageData], *, joint: bool) -> list[ReadRequest]:
    settings = ReadSettings(tokenizer=tok.name, endpoint=Endpoint.CHAT,
                            read_mode=ReadMode.JOINT if joint else ReadMode.ISOLATED)
    plan = plan_decision(image_decision(state, specs, images), settings, tok, images=images,
                         max_model_len=8192)
    return DecisionFlow(plan, settings, vocab_size=tok.info.vocab_size).next_requests()


def served_prompt(hf: Any, body: dict[str, Any], images: list[Image.Image]) -> list[int]:
    """What the server runs for a chat body: its messages rendered as vLLM renders them, the
    images expanded, the final assistant message continued."""
    (user, prefill) = body["messages"]
    parts = user["content"]
    assert [p["type"] for p in parts] == ["image_url"] * len(images) + ["text"]
    assert prefill["role"] == "assistant" and prefill["content"].endswith(THOUGHT)
    return _render(hf, [{"role": "user", "content": parts[-1]["text"]}, prefill], images,
                   add_generation_prompt=body["add_generation_prompt"],
                   continue_final_message=body["continue_final_message"])


def check_same(hf: Any, request: ReadRequest, expected: dict[str, Any],
               images: list[tuple[Image.Image, ImageData]]) -> None:
    body = request.body
    xargs = body["vllm_xargs"]
    assert [p["image_url"]["url"] for p in body["messages"][0]["content"][:-1]] == \
        [fetched.url for _, fetched in images]
    assert served_prompt(hf, dict(body), [pil for pil, _ in images]) == expected["prompt"]
    assert xargs["diffusion_seed_canvas"] == expected["canvas"]
    assert xargs["diffusion_canvas_length"] == expected["width"]
    assert body["logprob_token_ids"] == expected["logprob_ids"]
    assert body["max_tokens"] == expected["max_tokens"]
    assert xargs["diffusion_max_steps"] == 1 and xargs["diffusion_read_only"] is True


CASES = {
    "one image": (STATE, [RED]),
    "two images": ("Do these pictures show the same thing?", [RED, TALL]),
    "an image with a null state": (None, [SQUARE]),
}
SPECS = [noul(1), choice(3), score(5)]


@pytest.mark.parametrize("tokenizer", ["named", "as shipped"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("joint", [False, True], ids=["isolated", "joint"])
def test_draw_zero_is_vllms_image_read(request: pytest.FixtureRequest, named_hf: Any,
                                       tokenizer: str, case: str, joint: bool) -> None:
    tok = request.getfixturevalue("named_tokenizer" if tokenizer == "named"
                                  else "approx_tokenizer")
    state, images = CASES[case]
    requests = dreads_image_reads(tok, state, SPECS, [f for _, f in images], joint=joint)
    expected = vllm_image_reads(named_hf, state, SPECS, [p for p, _ in images], joint=joint)
    assert len(requests) == len(expected) == (1 if joint else 3)
    for sent, read in zip(requests, expected, strict=True):
        check_same(named_hf, sent, read, images)
    unit_prompt = plan_decision(
        image_decision(state, SPECS, [f for _, f in images]),
        ReadSettings(read_mode=ReadMode.JOINT if joint else ReadMode.ISOLATED), tok,
        images=[f for _, f in images]).units[0].prompt_ids
    assert list(unit_prompt) == expected[0]["prompt"]  # what the context check counts


def test_a_null_state_is_written_null_as_vllm_writes_it(named_tokenizer: HFTextTokenizer) -> None:
    (sent, *_) = dreads_image_reads(named_tokenizer, None, SPECS, [SQUARE[1]], joint=False)
    assert sent.body["messages"][0]["content"][-1]["text"].startswith("null\n\nQuestion: ")


def test_an_image_takes_its_processor_tokens(named_tokenizer: HFTextTokenizer,
                                             approx_tokenizer: HFTextTokenizer) -> None:
    """A 64x40 image is 273 soft tokens for Gemma 4's image processor: 275 ids with its
    delimiters, the same from the named tokenizer and the approx one."""
    ids = named_tokenizer.image_ids(64, 40)
    assert ids == (255999, *(258880,) * 273, 258882) == approx_tokenizer.image_ids(64, 40)


def test_later_draws_change_only_the_slot_noise(named_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings(tokenizer=named_tokenizer.name, policy=PolicyName.FIXED,
                            fixed_draws=3)
    images = [RED[1], TALL[1]]
    plan = plan_decision(image_decision(STATE, [noul(1)], images), settings, named_tokenizer,
                         images=images)
    flow = DecisionFlow(plan, settings, vocab_size=named_tokenizer.info.vocab_size)
    first = flow.next_requests()[0]
    slot = plan.units[0].slots[0].position
    canvases = [first.body["vllm_xargs"]["diffusion_seed_canvas"]]
    for _ in range(2):
        later = _next_draw(flow, plan)
        assert {k: v for k, v in later.body.items() if k != "vllm_xargs"} == \
            {k: v for k, v in first.body.items() if k != "vllm_xargs"}
        canvas = later.body["vllm_xargs"]["diffusion_seed_canvas"]
        assert canvas[:slot] + canvas[slot + 1:] == canvases[0][:slot] + canvases[0][slot + 1:]
        canvases.append(canvas)
    assert len({c[slot] for c in canvases}) == 3


def test_the_body_carries_the_parts_as_they_are(named_tokenizer: HFTextTokenizer) -> None:
    """The image parts, then the text, serialised to the same bytes every time."""
    images = [RED[1]]
    sent = dreads_image_reads(named_tokenizer, STATE, [noul(1)], images, joint=False)[0]
    again = dreads_image_reads(named_tokenizer, STATE, [noul(1)], images, joint=False)[0]
    assert encode_body(sent.body) == encode_body(again.body)
    assert sent.body["messages"][0]["content"][0] == \
        {"type": "image_url", "image_url": {"url": RED[1].url}}
    assert json.loads(encode_body(sent.body))["messages"] == sent.body["messages"]


def test_the_standin_reads_images_by_gemma4s_rule(standin_tokenizer: HFTextTokenizer) -> None:
    """The stand-in names Gemma 4's image tokens at its own ids: 102, 103, 104."""
    images = [RED[1]]
    settings = ReadSettings()
    plan = plan_decision(image_decision(STATE, [noul(1)], images), settings,
                         standin_tokenizer, images=images)
    prompt = plan.units[0].prompt_ids
    assert prompt.count(103) == 273 and prompt.count(102) == prompt.count(104) == 1
    text = plan_decision(image_decision(STATE, [noul(1)], []), settings, standin_tokenizer)
    assert len(prompt) - len(text.units[0].prompt_ids) == 275 + 1  # the ids and a newline


def test_the_context_check_counts_the_images(named_tokenizer: HFTextTokenizer) -> None:
    images = [SQUARE[1], SQUARE[1]]
    decision = image_decision(STATE, [noul(1)], images)
    settings = ReadSettings()
    need = len(plan_decision(decision, settings, named_tokenizer,
                             images=images).units[0].prompt_ids) + 16
    assert need > 2 * 280
    plan_decision(decision, settings, named_tokenizer, images=images, max_model_len=need)
    with pytest.raises(PromptTooLong, match=r"and 2 image\(s\) included.*send fewer images"):
        plan_decision(decision, settings, named_tokenizer, images=images,
                      max_model_len=need - 1)


def test_completions_cannot_carry_images(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings(endpoint=Endpoint.COMPLETIONS)
    with pytest.raises(ImagesNeedChat, match=r"token ids.*use --endpoint chat"):
        plan_decision(image_decision(STATE, [noul(1)], [RED[1]]), settings, standin_tokenizer,
                      images=[RED[1]])


def test_dreads_layouts_refuse_images(standin_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings(layout=Layout.DOCUMENT_FIRST)
    with pytest.raises(ImagesNeedVllmLayout, match=r"reads text only: use --layout vllm"):
        plan_decision(image_decision(STATE, [noul(1)], [RED[1]]), settings, standin_tokenizer,
                      images=[RED[1]])


def test_images_that_are_not_the_decisions_are_refused(
        standin_tokenizer: HFTextTokenizer) -> None:
    """A decision with images is never read without them."""
    decision = image_decision(STATE, [noul(1)], [RED[1], TALL[1]])
    for given in ([], [RED[1]], [TALL[1], RED[1]]):
        with pytest.raises(ValueError, match="fetch each of its images"):
            plan_decision(decision, ReadSettings(), standin_tokenizer, images=given)


def test_a_processor_counts_when_the_source_has_one(named_dir: Path, tmp_path: Path) -> None:
    """A model directory with a processor: transformers' Gemma4Processor counts the tokens."""
    pytest.importorskip("torchvision", reason="transformers' Gemma4Processor needs torchvision")
    from transformers import AutoProcessor, AutoTokenizer
    from transformers.models.gemma4 import (
        Gemma4AudioFeatureExtractor,
        Gemma4ImageProcessorPil,
        Gemma4Processor,
        Gemma4VideoProcessor,
    )

    processor = Gemma4Processor(Gemma4AudioFeatureExtractor(), Gemma4ImageProcessorPil(),
                                AutoTokenizer.from_pretrained(named_dir), Gemma4VideoProcessor())
    processor.save_pretrained(tmp_path)
    assert AutoProcessor.from_pretrained(tmp_path) is not None
    tok = load_tokenizer(str(tmp_path))
    assert tok._processor() is not None
    pil, _ = TALL
    expanded = processor(text=["<|image|>"], images=[[pil]],
                         add_special_tokens=False)["input_ids"][0]
    assert tok.image_ids(*pil.size) == tuple(expanded)


@pytest.mark.parametrize("tokenizer", ["named_tokenizer", "standin_tokenizer"])
def test_a_served_body_renders_to_the_units_prompt(request: pytest.FixtureRequest,
                                                   tokenizer: str) -> None:
    """A server that renders the body (the simulator, the in-process engine) reads the sizes
    from the data URLs and runs the prompt dreads planned, thought block included."""
    tok = request.getfixturevalue(tokenizer)
    images = [RED[1], TALL[1]]
    settings = ReadSettings(tokenizer=tok.name, read_mode=ReadMode.JOINT)
    plan = plan_decision(image_decision(STATE, SPECS, images), settings, tok, images=images)
    body = DecisionFlow(plan, settings, vocab_size=tok.info.vocab_size).next_requests()[0].body
    rendered = tok.render_chat(body["messages"],
                               add_generation_prompt=body.get("add_generation_prompt", True),
                               continue_final_message=body.get("continue_final_message", False))
    assert tuple(rendered) == plan.units[0].prompt_ids


def test_an_image_part_without_a_size_must_be_a_data_url(
        standin_tokenizer: HFTextTokenizer) -> None:
    messages = ({"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
        {"type": "text", "text": "red?"}]},)
    with pytest.raises(ValueError, match=r"not a base64 data URL .*; pass its size"):
        standin_tokenizer.chat_prompt_ids(messages)
    assert len(standin_tokenizer.chat_prompt_ids(messages, image_sizes=[(64, 40)])) > 273


def test_the_models_vision_budget_counts(named_dir: Path, tmp_path: Path) -> None:
    """A model directory whose config.json sets a smaller budget (vLLM reads it there)."""
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (tmp_path / name).symlink_to(named_dir / name)
    (tmp_path / "config.json").write_text(json.dumps({"vision_config": {
        "patch_size": 16, "pooling_kernel_size": 3, "default_output_length": 70}}))
    tok = load_tokenizer(str(tmp_path))
    assert tok.image_rule.max_soft_tokens == 70
    assert len(tok.image_ids(512, 512)) == 64 + 2  # 384 x 384 pixels: 8 x 8 tokens
