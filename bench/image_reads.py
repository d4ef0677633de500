"""What images cost the in-process transformers engine: the image encoder's memory and load
time, the vision tower's time per image, and an image prompt's prefill next to a text prompt's
of the same length; and an image read checked against transformers' own forward.

The model is the full-size DiffusionGemma architecture (the released text config, image tokens
attending both ways, ``use_bidirectional_attention="vision"``) with transformers' default
Gemma 4 vision config, random bf16 weights built on the device (``--config small``: the tiny
model, for a CPU smoke run). Images are generated PNGs sent as data URLs, as dreads sends them.

    python bench/image_reads.py --device cuda                   # H200
    python bench/image_reads.py --config small --device cpu
    python bench/image_reads.py --count-only                     # the encoder's size, no device
"""

from __future__ import annotations

import argparse
import base64
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from PIL import Image
from safetensors.torch import save_file
from transformers import AutoModel, DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
from transformers.models.diffusion_gemma.modeling_diffusion_gemma import (
    DiffusionGemmaMultimodalEmbedder,
)

from app.inprocess import ReadModel, build_tiny_model
from app.inprocess.fp8_load import VISION, drop_vision
from app.inprocess.images import ImagePreparer, load_image_processor
from app.inprocess.model import DecodeRow, ImagePrefill, PrefillJob
from app.inprocess.vision import load_vision
from bench.transformers_reads import FULL_TEXT

GIB = float(1 << 30)
TEXT_TOKENS = 200  #: text around the image in the prompt (a question and its thought block)
SLOTS, LOGPROB_IDS = (1, 2), (3, 7, 11)


def count_encoder() -> None:
    """The full-size image encoder's parameters and bf16 bytes, counted on the meta device."""
    config = DiffusionGemmaConfig(text_config=FULL_TEXT)
    with torch.device("meta"):
        tower = AutoModel.from_config(config.vision_config, dtype=torch.bfloat16)
        embed = DiffusionGemmaMultimodalEmbedder(config.vision_config, config.text_config)
    vision, hidden = config.vision_config, config.text_config.hidden_size
    for name, module in (("vision tower", tower), ("projection", embed)):
        count = sum(p.numel() for p in module.parameters())
        print(f"{name}: {count / 1e6:.1f} M parameters, {count * 2 / GIB:.3f} GiB in bf16")
    print(f"({vision.num_hidden_layers} layers x {vision.hidden_size}, patch {vision.patch_size}, "
          f"pooling {vision.pooling_kernel_size}; into text hidden {hidden})")


def build(config: str, device: str) -> ReadModel:
    torch.manual_seed(0)
    if config == "small":
        return ReadModel(build_tiny_model(1024).to(device))
    cfg = DiffusionGemmaConfig(text_config=dict(FULL_TEXT, use_bidirectional_attention="vision"),
                               canvas_length=256)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = DiffusionGemmaForBlockDiffusion(cfg)
    finally:
        torch.set_default_dtype(previous)
    return ReadModel(model.eval())


def data_url(width: int, height: int, seed: int) -> str:
    """A PNG of random blocks (compresses like a photo would not; the engine decodes it)."""
    generator = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, 256, (height // 16 + 1, width // 16 + 1, 3), generator=generator)
    pixels = blocks.repeat_interleave(16, 0).repeat_interleave(16, 1)[:height, :width]
    buffer = io.BytesIO()
    Image.fromarray(pixels.to(torch.uint8).numpy()).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def timed(fn: Callable[[], Any], device: torch.device, repeats: int = 5) -> float:
    """Median milliseconds of ``fn`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - started) * 1000.0)
    return statistics.median(times)


def encoder_bytes(model: ReadModel) -> int:
    encoder = model.model.model.encoder
    return sum(t.nbytes for name in ("vision_tower", "embed_vision")
               for t in getattr(encoder, name).state_dict().values())


def load_figures(model: ReadModel) -> tuple[float, float]:
    """(seconds, GiB) to read the image encoder back from a checkpoint file, as the first image
    read of a loaded checkpoint does."""
    state = {f"{VISION[0]}.{k}": v.contiguous().cpu() for k, v in
             model.model.model.encoder.vision_tower.state_dict().items()}
    state |= {f"{VISION[1]}.{k}": v.contiguous().cpu() for k, v in
              model.model.model.encoder.embed_vision.state_dict().items()}
    with tempfile.TemporaryDirectory() as folder:
        save_file(state, f"{folder}/model.safetensors")
        drop_vision(model.model)
        started = time.perf_counter()
        taken = load_vision(model.model, folder)
        return time.perf_counter() - started, taken / GIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=["full", "small"], default="full")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--count-only", action="store_true",
                        help="only count the full-size image encoder (no device needed)")
    args = parser.parse_args()
    if args.count_only:
        count_encoder()
        return
    model = build(args.config, args.device)
    device = model.device
    config = model.model.config
    vision = config.vision_config
    print(f"model: {args.config}, {model.weights}, vision tower {vision.num_hidden_layers} "
          f"layers x {vision.hidden_size}")
    print(f"image encoder: {encoder_bytes(model) / GIB:.3f} GiB")
    seconds, gib = load_figures(model)
    print(f"image encoder read from a checkpoint file: {seconds:.2f} s ({gib:.3f} GiB)")
    preparer = ImagePreparer(load_image_processor(None), memo=0)
    top = min(20000, model.vocab_size - 3)  # clear of the image ids
    text = [int(i) for i in torch.randint(200, top, (TEXT_TOKENS,))]
    canvas = tuple(int(i) for i in torch.randint(200, top, (256,)))
    print("| image (px) | soft tokens | decode + processor ms | vision tower ms | image prompt "
          "prefill ms | text prompt prefill ms (same length) | decode ms | max abs dlogprob vs "
          "transformers, image prompt | the same, text prompt (the dtype's floor) |")
    for k, (width, height) in enumerate([(768, 768), (1024, 768), (1920, 1080), (256, 256)]):
        url = data_url(width, height, k)
        prepare_ms = timed(lambda url=url: preparer.prepare([url]), device)
        images = preparer.prepare([url])
        vision_ms = timed(lambda images=images: model.vision.model.model.encoder
                          .get_image_features(images.pixel_values.to(device, model.model.dtype),
                                              images.position_ids.to(device)), device)
        n = images.tokens
        prompt = (2, 105, config.boi_token_id, *[config.image_token_id] * n, config.eoi_token_id,
                  *text)
        image_ms = timed(lambda p=prompt, i=images: model.prefill_images([ImagePrefill(p, i)]),
                         device)
        text_prompt = (2, 105, *[int(i) for i in torch.randint(200, top, (n + 2,))], *text)
        text_ms = timed(lambda t=text_prompt: model.prefill([PrefillJob(None, t)]), device)
        entry = model.prefill_images([ImagePrefill(prompt, images)])[0]
        row = DecodeRow(entry, canvas, SLOTS, LOGPROB_IDS)
        decode_ms = timed(lambda r=row: model.decode([r]), device)
        delta = reference_delta(model, prompt, images, canvas, model.decode([row])[0].logprobs)
        text_entry = model.prefill([PrefillJob(None, text_prompt)])[0]
        text_row = DecodeRow(text_entry, canvas, SLOTS, LOGPROB_IDS)
        floor = reference_delta(model, text_prompt, None, canvas,
                                model.decode([text_row])[0].logprobs)
        print(f"| {width}x{height} | {n} | {prepare_ms:.1f} | {vision_ms:.1f} | {image_ms:.1f} | "
              f"{text_ms:.1f} | {decode_ms:.1f} | {delta:.2e} | {floor:.2e} |")
    if device.type == "cuda":
        print(f"peak GiB allocated: {torch.cuda.max_memory_allocated(device) / GIB:.2f}")


def reference_delta(model: ReadModel, prompt: tuple[int, ...], images: Any,
                    canvas: tuple[int, ...], ours: torch.Tensor) -> float:
    """Max |log-prob| difference from transformers' forward (with pixel values when the
    prompt has ``images``)."""
    tokens = torch.tensor([prompt], device=model.device)
    pixels: dict[str, Any] = {}
    if images is not None:
        pixels = {"pixel_values": images.pixel_values.to(model.device, model.model.dtype),
                  "image_position_ids": images.position_ids.to(model.device),
                  "mm_token_type_ids": (tokens == model.image_token_id).long()}
    with torch.inference_mode():
        logits = model.model(input_ids=tokens, **pixels,
                             decoder_input_ids=torch.tensor([canvas], device=model.device)).logits
    reference = torch.log_softmax(logits[0, list(SLOTS)].float(), dim=-1)[:, list(LOGPROB_IDS)]
    return float((reference.cpu() - ours).abs().max())


if __name__ == "__main__":
    main()
