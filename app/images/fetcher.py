"""``ImageFetcher``: blocking http(s) image fetches for threads (submit's 16 fetchers), each
held to its total deadline exactly, over one pooled ``httpx.AsyncClient`` on an event loop of
the fetcher's own thread. A blocking client could only bound each read, not the whole fetch."""

from __future__ import annotations

import asyncio
import threading

from app.images.policy import ImagePolicy
from app.images.remote import get_image_async, image_async_client

__all__ = ["ImageFetcher"]


class ImageFetcher:
    """Fetches under ``policy`` from any thread (``get``); ``close`` when done."""

    def __init__(self, policy: ImagePolicy) -> None:
        self.policy = policy
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="dreads-image-fetcher")
        self._thread.start()
        self._client = image_async_client(policy)

    def get(self, ref: str) -> tuple[bytes, str | None]:
        """``get_image_async(ref)`` on the fetcher's loop: the body and its media type.

        Raises:
            ImageUnreachable, ImageError: as ``get_image_async``.
        """
        done = asyncio.run_coroutine_threadsafe(
            get_image_async(ref, self.policy, self._client), self._loop)
        return done.result()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._client.aclose(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()
