"""Gemma 4's image token count (``app.engine.image_tokens``) is transformers' own."""

from __future__ import annotations

import itertools

import pytest
from PIL import Image

from app.engine.image_tokens import (
    GEMMA4_IMAGE_IDS,
    ImageRule,
    image_prompt_ids,
    soft_token_count,
)

RULE = ImageRule(*GEMMA4_IMAGE_IDS)
SIDES = [1, 2, 3, 7, 16, 47, 48, 49, 100, 333, 768, 1000, 4096, 12000]


def _transformers_count(width: int, height: int) -> int:
    from transformers.models.gemma4.processing_gemma4 import get_aspect_ratio_preserving_size

    target_h, target_w = get_aspect_ratio_preserving_size(height, width, 16, 280 * 9, 3)
    return (target_h // 16) * (target_w // 16) // 9


def test_the_count_is_transformers_gemma4_rule() -> None:
    """Every pair of sides, squares to 12000:1 strips."""
    for width, height in itertools.product(SIDES, SIDES):
        assert soft_token_count(width, height, RULE) == _transformers_count(width, height), \
            (width, height)


@pytest.mark.parametrize("size", [(64, 40), (30, 200), (512, 512), (3, 900), (1920, 1080)])
def test_the_count_is_what_the_image_processor_makes(size: tuple[int, int]) -> None:
    """The soft tokens Gemma 4's image processor makes of a real picture."""
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    made = Gemma4ImageProcessorPil()([Image.new("RGB", size)])["num_soft_tokens_per_image"]
    assert soft_token_count(*size, RULE) == made[0]


def test_an_image_is_its_delimiters_around_its_soft_tokens() -> None:
    assert image_prompt_ids(48, 48, ImageRule(7, 8, 9, max_soft_tokens=4)) == (7, 8, 8, 8, 8, 9)
    assert len(image_prompt_ids(10_000, 10, RULE)) == 280 + 2  # at most the budget


def test_an_image_without_pixels_is_refused() -> None:
    with pytest.raises(ValueError, match="sides must be >= 1"):
        soft_token_count(0, 10, RULE)
