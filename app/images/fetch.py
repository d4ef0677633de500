"""A reference -> its checked ``ImageData`` (``fetch_image``; ``fetch_image_async`` on a loop)."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import Executor

import httpx

from app.engine.types import ImageData
from app.images.check import check_image
from app.images.data_url import decode_data_url
from app.images.fetcher import ImageFetcher
from app.images.limits import ByteBudget
from app.images.local import read_file
from app.images.policy import ImagePolicy
from app.images.refs import ref_kind
from app.images.remote import get_image, get_image_async
from app.images.stored import stored_image

__all__ = ["fetch_image", "fetch_image_async"]


def fetch_image(ref: str, *, policy: ImagePolicy, client: ImageFetcher | None = None
                ) -> ImageData:
    """Read ``ref`` (data URL, allowed ``file://`` path, or http(s) URL) and check it.

    Raises:
        ImageError: unreadable, not an image, over the size limit, a file outside the allowed
            directories; ``ImageUnreachable`` for a URL that did not answer or answered an
            HTTP error (its status on ``.status``). The message names the reference.
    """
    kind = ref_kind(ref)
    declared: str | None = None
    if kind == "data":
        data, declared = decode_data_url(ref, max_bytes=policy.max_bytes)
    elif kind == "file":
        data = read_file(ref, policy)
    else:
        data, declared = client.get(ref) if client is not None else get_image(ref, policy)
    return check_image(ref, data, declared_type=declared, max_pixels=policy.max_pixels)


async def fetch_image_async(ref: str, *, policy: ImagePolicy,
                            client: httpx.AsyncClient | None = None,
                            pool: Executor | None = None,
                            budget: ByteBudget | None = None) -> ImageData:
    """``fetch_image`` on an event loop: files are read and images decoded in ``pool`` (a
    bounded executor; None: the loop's default one); with ``budget``, the bytes are taken
    from the decision's budget as they come."""
    loop = asyncio.get_running_loop()
    kind = ref_kind(ref)
    if kind == "http":
        data, declared = await get_image_async(ref, policy, client, budget)
        return await loop.run_in_executor(pool, functools.partial(
            check_image, ref, data, declared_type=declared, max_pixels=policy.max_pixels))
    image = await loop.run_in_executor(pool, functools.partial(fetch_image, ref,
                                                               policy=policy))
    if budget is not None:
        budget.take(stored_image(image).size or 0)
    return image
