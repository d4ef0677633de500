"""The images of a chat read: its ``image_url`` parts, decoded and run through Gemma 4's image
processor (transformers' own), ready for the vision tower.

dreads sends every image as a data URL (fetched and checked once per decision, ``app.images``),
so the engine reads data URLs only. ``ImageInputs.key`` is a digest of the images' bytes: the
prompt cache keys an image prompt by its ids *and* this digest, since the image placeholder ids
of two different images are the same.
"""

from __future__ import annotations

import hashlib
import io
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image, UnidentifiedImageError
from transformers import AutoImageProcessor
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

from app.errors import UpstreamRejected
from app.tokenizer import chat_parts

__all__ = ["ImageInputs", "ImagePreparer", "image_urls", "load_image_processor"]

_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


@dataclass(frozen=True, eq=False)
class ImageInputs:
    """A read's images as the vision tower takes them, in prompt order."""

    key: bytes  #: sha256 of the images' URLs (a data URL is its bytes)
    pixel_values: torch.Tensor  #: (images, max_patches, patch_size**2 * 3) float32, padded
    position_ids: torch.Tensor  #: (images, max_patches, 2), (-1, -1) for padding patches
    soft_tokens: tuple[int, ...]  #: per image: its placeholder tokens in the prompt
    sizes: tuple[tuple[int, int], ...]  #: per image: (width, height) in pixels

    @property
    def tokens(self) -> int:
        return sum(self.soft_tokens)


def image_urls(messages: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The URLs of the messages' image content parts, in order.

    Raises:
        UpstreamRejected: an image part without a URL.
    """
    urls = chat_parts.image_urls(messages)
    if not all(urls):
        raise UpstreamRejected("an image_url content part has no url: send "
                               '{"type": "image_url", "image_url": {"url": ...}}',
                               param="messages")
    return urls


def load_image_processor(source: str | None, vision_config: Any = None) -> Any:
    """Gemma 4's image processor: the checkpoint's own configuration when ``source`` is a
    directory that has one, else transformers' defaults (at most 280 soft tokens an image) with
    the vision tower's patch size and pooling, and its ``default_output_length`` as the budget
    where its config sets one (as vLLM counts an image's tokens).

    Raises:
        ValueError: a budget Gemma 4's processor does not take (70, 140, 280, 560 or 1120).
    """
    if source is not None and any((Path(source) / name).is_file() for name in _PROCESSOR_FILES):
        return AutoImageProcessor.from_pretrained(source)
    defaults = Gemma4ImageProcessorPil

    def setting(name: str, default: int) -> int:
        value = getattr(vision_config, name, None)
        return value if isinstance(value, int) else default

    return Gemma4ImageProcessorPil(
        patch_size=setting("patch_size", defaults.patch_size),
        pooling_kernel_size=setting("pooling_kernel_size", defaults.pooling_kernel_size),
        max_soft_tokens=setting("default_output_length", defaults.max_soft_tokens))


class ImagePreparer:
    """Decodes and processes a read's images; the last ``memo`` distinct sets are kept, so the
    draws of one decision decode their images once."""

    def __init__(self, processor: Any, *, memo: int = 8) -> None:
        self.processor = processor
        self.memo = memo
        self._done: OrderedDict[bytes, ImageInputs] = OrderedDict()

    def prepare(self, urls: Sequence[str]) -> ImageInputs:
        """The ``ImageInputs`` of ``urls`` (data URLs).

        Raises:
            UpstreamRejected: a URL that is not a data URL, or bytes pillow cannot read as an
                image (the message names the image).
        """
        key = _digest(urls)
        inputs = self._done.get(key)
        if inputs is not None:
            self._done.move_to_end(key)
            return inputs
        images = [decode_data_url(url, index) for index, url in enumerate(urls)]
        out = self.processor(images=images, return_tensors="pt")
        inputs = ImageInputs(key, out["pixel_values"], out["image_position_ids"],
                             tuple(int(n) for n in out["num_soft_tokens_per_image"]),
                             tuple(image.size for image in images))
        self._done[key] = inputs
        if len(self._done) > self.memo:
            self._done.popitem(last=False)
        return inputs


def decode_data_url(url: str, index: int = 0) -> Image.Image:
    """The RGB image of a ``data:image/...;base64,`` URL.

    Raises:
        UpstreamRejected: not a base64 data URL, or not an image pillow can read.
    """
    what = f"image {index + 1} ({url[:40]}{'...' if len(url) > 40 else ''})"
    try:
        raw = chat_parts.data_url_bytes(url)
    except ValueError as exc:
        raise UpstreamRejected(
            f"{what}: {exc}; the transformers engine reads images sent as base64 data URLs, "
            "which is how dreads sends every image", param="messages") from exc
    try:
        with Image.open(io.BytesIO(raw)) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise UpstreamRejected(f"{what}: not an image pillow can read ({exc}); send a PNG, "
                               "JPEG, GIF or WebP", param="messages") from exc


def _digest(urls: Sequence[str]) -> bytes:
    h = hashlib.sha256()
    for url in urls:
        h.update(len(url).to_bytes(8, "little"))
        h.update(url.encode())
    return h.digest()

