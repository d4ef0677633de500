"""What a request to a decision endpoint carries for a decision's images (``--answer-by
systemone``): an http(s) or data URL as the decision gives it (the endpoint fetches a URL
itself, as vLLM's reader does for a request sent to it directly); a ``file://`` image read here,
under this process's ``ImagePolicy`` (``DREADS_IMAGE_DIRS``), and sent as a data URL, since the
endpoint cannot read this host's files."""

from __future__ import annotations

import asyncio

from app.engine.systemone import sent_image_url
from app.images import ImagePolicy, fetch_image_async

__all__ = ["endpoint_image_urls"]


async def endpoint_image_urls(refs: tuple[str, ...], policy: ImagePolicy) -> tuple[str, ...]:
    """The URL each image reference goes to the endpoint as, in order.

    Raises:
        ImageError: a local image that cannot be read (outside ``DREADS_IMAGE_DIRS``, missing,
            not an image, too large).
    """
    if all(sent_image_url(ref) for ref in refs):
        return refs

    async def one(ref: str) -> str:
        return ref if sent_image_url(ref) else (await fetch_image_async(ref, policy=policy)).url

    return tuple(await asyncio.gather(*(one(ref) for ref in refs)))
