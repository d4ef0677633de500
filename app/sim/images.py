"""The images of a chat read, as vLLM's chat preprocessing takes them: ``image_url`` content
parts (data URLs, or http(s) URLs the simulator fetches), at most ``image_limit`` a prompt,
each opened with pillow for its size and hashed.

vLLM's refusals, each a 400 ``BadRequestError``:

- more images than ``--limit-mm-per-prompt`` (vLLM's default for a model without a limit of
  its own, as DiffusionGemma/Gemma 4: 999): ``At most N image(s) may be provided in one
  prompt.`` (param ``image``);
- bytes pillow cannot open (a non-image URL or data URL): ``cannot identify image file``, as
  vLLM's image loader words it, with the image's place and what to send;
- a URL that does not answer, or answers an HTTP error: the status and the URL;
- a URL that is neither http(s) nor data: ``The URL must be either a HTTP, data or file URL.``
  (the simulator takes no local files: vLLM needs ``--allowed-local-media-path`` for them).

An image's prompt tokens are counted by the tokenizer's rule (``image_ids``: DiffusionGemma's is
Gemma 4's, ``<|image>``, N soft tokens, ``<image|>``), the rule dreads plans prompts with.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from app.engine.vllm_rules import VllmBadRequest
from app.tokenizer import chat_parts

__all__ = ["DEFAULT_IMAGE_LIMIT", "SimImage", "image_limit", "image_urls", "load_images"]

#: vLLM's limit on a modality a model does not limit itself (``--limit-mm-per-prompt``).
DEFAULT_IMAGE_LIMIT = 999
_FETCH_TIMEOUT_S = 5.0  #: vLLM 0.33's VLLM_IMAGE_FETCH_TIMEOUT default (envs.py)
_HTTP = ("http://", "https://")


@dataclass(frozen=True)
class SimImage:
    """One image of a read: what the answer and the prompt count go by."""

    url: str  #: as the request gave it
    data_url: str  #: the bytes, as a data URL
    media_type: str
    sha256: str
    width: int
    height: int


def image_limit(text: str | None) -> int:
    """The image limit of a ``--limit-mm-per-prompt`` value, vLLM's JSON object
    (``'{"image": 4}'``); None or no ``image`` key: vLLM's default.

    Raises:
        ValueError: not a JSON object, or an image count that is not a whole number >= 0.
    """
    if text is None:
        return DEFAULT_IMAGE_LIMIT
    try:
        limits = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--limit-mm-per-prompt must be a JSON object such as "
                         f"'{{\"image\": 4}}' ({exc})") from exc
    if not isinstance(limits, dict):
        raise ValueError("--limit-mm-per-prompt must be a JSON object such as '{\"image\": 4}'")
    count = limits.get("image", DEFAULT_IMAGE_LIMIT)
    if isinstance(count, dict):  # vLLM's richer form: {"image": {"count": 4, ...}}
        count = count.get("count", DEFAULT_IMAGE_LIMIT)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError(f"--limit-mm-per-prompt: the image count must be a whole number >= 0, "
                         f"got {count!r}")
    return count


def image_urls(messages: Sequence[Any]) -> tuple[str, ...]:
    """The image parts' URLs of every message, in order.

    Raises:
        VllmBadRequest: an image part without a URL string.
    """
    urls = chat_parts.image_urls(messages)
    if not all(urls):
        raise VllmBadRequest("1 validation error:\n  an image_url part needs "
                             "{\"image_url\": {\"url\": URL}}", param="messages",
                             kind="Bad Request")
    return urls


async def load_images(urls: Sequence[str], *, limit: int,
                      client: httpx.AsyncClient) -> tuple[SimImage, ...]:
    """Each image read, opened and hashed (http(s) URLs fetched at once).

    Raises:
        VllmBadRequest: too many images, one that is not an image, or cannot be fetched.
    """
    if len(urls) > limit:
        raise VllmBadRequest(f"At most {limit} image(s) may be provided in one prompt.",
                             param="image")
    datas = await asyncio.gather(*(_bytes(k, url, client) for k, url in enumerate(urls)))
    return tuple(await asyncio.gather(*(asyncio.to_thread(_opened, k, url, data)
                                        for k, (url, data) in enumerate(zip(urls, datas,
                                                                            strict=True)))))


async def _bytes(index: int, url: str, client: httpx.AsyncClient) -> bytes:
    if url.startswith("data:"):
        return _data_bytes(index, url)
    if not url.startswith(_HTTP):
        raise VllmBadRequest("The URL must be either a HTTP, data or file URL. (image "
                             f"{index}: {_short(url)}; the simulator reads no local files: "
                             "send a data URL)", param="image")
    try:
        response = await client.get(url, timeout=_FETCH_TIMEOUT_S, follow_redirects=True)
    except httpx.HTTPError as exc:
        raise VllmBadRequest(f"Cannot fetch image {index} from {_short(url)}: "
                             f"{type(exc).__name__}: {str(exc) or 'no answer'}. Check that the URL "
                             "answers from the model server.", param="image") from exc
    if response.status_code >= 400:
        raise VllmBadRequest(f"{response.status_code}, message={response.reason_phrase!r}, "
                             f"url={url!r}: image {index} could not be fetched; check the URL.",
                             param="image")
    return response.content


def _data_bytes(index: int, url: str) -> bytes:
    try:
        return chat_parts.data_url_bytes(url)
    except ValueError as exc:
        raise VllmBadRequest(f"image {index}: {exc}", param="image") from exc


def _opened(index: int, url: str, data: bytes) -> SimImage:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            width, height = image.size
            media_type = Image.MIME.get(image.format or "", "image/png")
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise VllmBadRequest(f"cannot identify image file (image {index}, {_short(url)}: "
                             f"{len(data)} bytes that are not an image; send a PNG, JPEG, "
                             "WebP or GIF)", param="image") from exc
    data_url = url if url.startswith("data:") else (
        f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}")
    return SimImage(url, data_url, media_type, hashlib.sha256(data).hexdigest(), width, height)


def _short(url: str) -> str:
    return url if len(url) <= 80 else f"{url[:60]}...({len(url)} chars)"

