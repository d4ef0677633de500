"""A worker's images by sha256: each image of an attempt fetched once and checked against the
sha256 stored at submit; an image several decisions share, or that a retry asks again, is
taken from memory while it fits."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import replace

from app.engine.types import ImageData
from app.errors import ImageChanged
from app.images.fetch import fetch_image_async
from app.images.policy import ImagePolicy
from app.images.refs import short_ref
from app.images.stored import StoredImage

__all__ = ["DEFAULT_CACHE_BYTES", "ImageCache"]

#: Data URL characters the cache holds at most (the least recently used go first).
DEFAULT_CACHE_BYTES = 256 * 1024 * 1024


class ImageCache:
    """Checked images of this process by sha256, bounded by ``max_chars`` of data URL.

    ``fetches`` counts the images actually fetched (not served from memory)."""

    def __init__(self, policy: ImagePolicy, *, max_chars: int = DEFAULT_CACHE_BYTES) -> None:
        self.policy = policy
        self.max_chars = max_chars
        self.fetches = 0
        self._held: OrderedDict[str, ImageData] = OrderedDict()
        self._chars = 0

    async def load(self, stored: StoredImage) -> ImageData:
        """The image ``stored`` refers to, as checked at submit.

        Raises:
            ImageChanged: its bytes now hash to another sha256 (permanent).
            ImageUnreachable: its URL did not answer (transient: a later attempt may).
            ImageError: it is no longer readable as an image within the policy.
        """
        held = self._held.get(stored.sha256) if stored.sha256 else None
        if held is not None:
            self._held.move_to_end(held.sha256)
            return held if held.ref == stored.ref else replace(held, ref=stored.ref)
        self.fetches += 1
        image = await fetch_image_async(stored.ref, policy=self.policy)
        if stored.sha256 is not None and image.sha256 != stored.sha256:
            raise ImageChanged(f"image {short_ref(stored.ref)}: its bytes changed since submit "
                               f"(sha256 {image.sha256[:12]}..., submitted "
                               f"{stored.sha256[:12]}...); the decision is not answered about "
                               "another picture: submit it again under a new id or run")
        self._keep(image)
        return image

    async def load_all(self, images: tuple[StoredImage, ...]) -> tuple[ImageData, ...]:
        """Every image of one decision, fetched together, in order."""
        return tuple(await asyncio.gather(*(self.load(image) for image in images)))

    def _keep(self, image: ImageData) -> None:
        if len(image.url) > self.max_chars or image.sha256 in self._held:
            return
        self._held[image.sha256] = image
        self._chars += len(image.url)
        while self._chars > self.max_chars:
            _, dropped = self._held.popitem(last=False)
            self._chars -= len(dropped.url)
