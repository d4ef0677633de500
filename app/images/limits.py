"""The limits on a decision's images as a whole: how many (``DREADS_IMAGE_MAX_COUNT``) and
their bytes together (``DREADS_IMAGE_MAX_TOTAL_BYTES``); each image's own limits are checked
where it is read."""

from __future__ import annotations

from dataclasses import dataclass

from app.errors import ImageError
from app.images.policy import ImagePolicy
from app.images.refs import short_ref

__all__ = ["ByteBudget", "image_too_large", "over_total", "too_many_images"]


def image_too_large(ref: str, max_bytes: int, size: int | None = None) -> ImageError:
    """An image over ``DREADS_IMAGE_MAX_BYTES`` (``size``: its bytes, where known), however it
    came (a data URL, a file, a fetch)."""
    said = f"{size:,} bytes, over the limit of {max_bytes:,}" if size is not None else \
        f"over the limit of {max_bytes:,} bytes"
    return ImageError(f"image {short_ref(ref)}: {said}; shrink it or raise "
                      "DREADS_IMAGE_MAX_BYTES")


def too_many_images(count: int, policy: ImagePolicy) -> str | None:
    """Why a decision with ``count`` images is refused (None: it is not)."""
    if count <= policy.max_count:
        return None
    return (f"{count} images, over the limit of {policy.max_count} per decision; send fewer "
            "or raise DREADS_IMAGE_MAX_COUNT")


def over_total(size: int, policy: ImagePolicy) -> str | None:
    """Why a decision whose images hold ``size`` bytes in all is refused (None: it is not)."""
    if size <= policy.max_total_bytes:
        return None
    return (f"its images hold {size:,} bytes in all, over the limit of "
            f"{policy.max_total_bytes:,} per decision; send fewer or smaller images or raise "
            "DREADS_IMAGE_MAX_TOTAL_BYTES")


@dataclass
class ByteBudget:
    """The image bytes one decision has left, taken as its images are read (a request's
    fetches stop at ``DREADS_IMAGE_MAX_TOTAL_BYTES`` together, not each at its own limit)."""

    policy: ImagePolicy
    used: int = 0

    def check(self, more: int) -> None:
        """Raises ImageError when ``more`` bytes would go over the budget."""
        reason = over_total(self.used + more, self.policy)
        if reason is not None:
            raise ImageError(reason)

    def take(self, more: int) -> None:
        """Count ``more`` bytes read. Raises ImageError past the budget."""
        self.check(more)
        self.used += more
