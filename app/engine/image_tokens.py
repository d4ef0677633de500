"""How many prompt tokens an image takes: Gemma 4's rule (DiffusionGemma reads images as Gemma 4).

An image of ``width`` x ``height`` pixels is resized, keeping its aspect ratio, to the largest
size that is a multiple of ``patch_size * pooling`` on both sides and has at most
``max_soft_tokens * pooling**2`` patches; each ``pooling`` x ``pooling`` block of patches is one
soft token. An extreme aspect ratio that rounds a side to zero keeps one block on that side and
gives the other side ``floor(long / short)`` blocks, at most the budget. This is the count of
transformers' ``Gemma4Processor`` (``get_aspect_ratio_preserving_size``) and of vLLM 0.33's
prompt update; ``tests/unit/engine/test_image_tokens.py`` checks it against transformers.

In the prompt an image is ``boi`` + ``image`` x N + ``eoi`` (``image_prompt_ids``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GEMMA4_IMAGE_IDS", "ImageRule", "image_prompt_ids", "soft_token_count"]


@dataclass(frozen=True)
class ImageRule:
    """The image token ids of a tokenizer and the image processor's budget."""

    boi_id: int  #: ``<|image>``, opens an image
    image_id: int  #: ``<|image|>``: the placeholder the chat template writes, and each soft token
    eoi_id: int  #: ``<image|>``, closes an image
    patch_size: int = 16
    pooling: int = 3
    max_soft_tokens: int = 280


#: DiffusionGemma's (Gemma 4's) ids: boi 255999, image 258880, eoi 258882.
GEMMA4_IMAGE_IDS = (255_999, 258_880, 258_882)


def _resized(height: int, width: int, rule: ImageRule) -> tuple[int, int]:
    side = rule.pooling * rule.patch_size
    budget = rule.max_soft_tokens * rule.pooling ** 2 * rule.patch_size ** 2
    factor = math.sqrt(budget / (height * width))
    target_h = math.floor(factor * height / side) * side
    target_w = math.floor(factor * width / side) * side
    longest = rule.max_soft_tokens * side
    if target_h == 0:
        return side, min(math.floor(width / height) * side, longest)
    if target_w == 0:
        return min(math.floor(height / width) * side, longest), side
    return target_h, target_w


def soft_token_count(width: int, height: int, rule: ImageRule) -> int:
    """The image's soft tokens (N) under ``rule``.

    Raises:
        ValueError: a side that is not a positive number of pixels.
    """
    if width < 1 or height < 1:
        raise ValueError(f"an image of {width}x{height} pixels has no tokens; sides must be >= 1")
    target_h, target_w = _resized(height, width, rule)
    patches = (target_h // rule.patch_size) * (target_w // rule.patch_size)
    return min(patches // rule.pooling ** 2, rule.max_soft_tokens)


def image_prompt_ids(width: int, height: int, rule: ImageRule) -> tuple[int, ...]:
    """The ids an image takes in the prompt: ``boi``, N ``image`` ids, ``eoi``."""
    n = soft_token_count(width, height, rule)
    return (rule.boi_id, *(rule.image_id,) * n, rule.eoi_id)
