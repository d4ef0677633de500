"""http(s) images: one GET, following at most ``MAX_REDIRECTS`` redirects, the body read up to
the size limit, the whole fetch cut at the policy's deadline (not a timeout per read: a server
that drips a byte at a time is cut too).

Under a guard (``dreads serve``) every connection, redirects included, goes only to an
address the guard allows, and a fetch that fails for any reason below HTTP (refused by the
guard, a closed port, a server that is not HTTP, a timeout) is told in the same one line."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import httpx

from app.errors import ImageError, ImageUnreachable
from app.images.guard import AsyncGuardedTransport
from app.images.limits import ByteBudget, image_too_large
from app.images.policy import ImagePolicy
from app.images.refs import short_ref

__all__ = ["MAX_REDIRECTS", "get_image", "get_image_async", "image_async_client"]

#: Redirects one image fetch follows at most (each one checked as the first request is).
MAX_REDIRECTS = 5


def image_async_client(policy: ImagePolicy) -> httpx.AsyncClient:
    """The HTTP client of image fetches under ``policy`` (its guard, if any, on every
    connection)."""
    transport = AsyncGuardedTransport(policy.guard) if policy.guard is not None else None
    return httpx.AsyncClient(timeout=policy.timeout_s, follow_redirects=True,
                             max_redirects=MAX_REDIRECTS, transport=transport,
                             trust_env=policy.guard is None)


def _status_error(ref: str, response: httpx.Response) -> ImageUnreachable:
    return ImageUnreachable(f"image {short_ref(ref)}: the server answered HTTP "
                            f"{response.status_code} {response.reason_phrase}; check the URL",
                            status=response.status_code)


def _transport_error(ref: str, exc: httpx.HTTPError | TimeoutError,
                     policy: ImagePolicy) -> ImageUnreachable:
    if policy.guard is not None:  # one line, whatever failed: no port scan through it
        return ImageUnreachable(f"could not fetch image URL {short_ref(ref)}; give a URL this "
                                "server can reach on the internet, or a data URL (an operator "
                                "opens other hosts with DREADS_FETCH_ALLOW)")
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return ImageUnreachable(f"image {short_ref(ref)}: not fetched within "
                                f"{policy.timeout_s:g} s; check the URL, or raise "
                                "DREADS_IMAGE_TIMEOUT")
    return ImageUnreachable(f"image {short_ref(ref)}: unreachable ({type(exc).__name__}: "
                            f"{exc}); check the URL and that its server is up")


def _declared_length(response: httpx.Response) -> int | None:
    try:
        return int(response.headers["content-length"])
    except (KeyError, ValueError):
        return None


def _media_type(response: httpx.Response) -> str | None:
    value = response.headers.get("content-type", "")
    return value.split(";")[0].strip().lower() or None


class _Body:
    """A response's body read up to the policy's limit: the status and the declared length
    checked first, then each piece as it comes (the sync and async reads share it)."""

    def __init__(self, ref: str, policy: ImagePolicy, response: httpx.Response,
                 budget: ByteBudget | None) -> None:
        if response.is_error:
            raise _status_error(ref, response)
        declared = _declared_length(response)
        if declared is not None and declared > policy.max_bytes:
            raise image_too_large(ref, policy.max_bytes)
        if declared is not None and budget is not None:
            budget.check(declared)
        self.ref, self.policy, self.response, self.budget = ref, policy, response, budget
        self.data = bytearray()

    def add(self, piece: bytes) -> None:
        if self.budget is not None:
            self.budget.take(len(piece))
        self.data += piece
        if len(self.data) > self.policy.max_bytes:
            raise image_too_large(self.ref, self.policy.max_bytes)

    def result(self) -> tuple[bytes, str | None]:
        return bytes(self.data), _media_type(self.response)


def get_image(ref: str, policy: ImagePolicy) -> tuple[bytes, str | None]:
    """``get_image_async`` from blocking code (a loop of its own for this one fetch, in a
    thread of its own when this one runs a loop; threads that fetch many share an
    ``app.images.fetcher.ImageFetcher``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(get_image_async(ref, policy))
    with ThreadPoolExecutor(1, thread_name_prefix="dreads-image") as thread:
        return thread.submit(asyncio.run, get_image_async(ref, policy)).result()


async def get_image_async(ref: str, policy: ImagePolicy,
                          client: httpx.AsyncClient | None = None,
                          budget: ByteBudget | None = None) -> tuple[bytes, str | None]:
    """The body of ``ref`` and its media type (``Content-Type``; None: none given), the whole
    fetch cut at ``policy.timeout_s``.

    Raises:
        ImageUnreachable: refused, timed out, or an HTTP error status.
        ImageError: the body is over ``policy.max_bytes``, or over what ``budget`` (the
            decision's images together) has left.
    """
    own = client is None
    client = client or image_async_client(policy)
    try:
        async with asyncio.timeout(policy.timeout_s):
            async with client.stream("GET", ref, timeout=policy.timeout_s) as response:
                body = _Body(ref, policy, response, budget)
                async for piece in response.aiter_bytes():
                    body.add(piece)
                return body.result()
    except (httpx.HTTPError, TimeoutError) as exc:
        raise _transport_error(ref, exc, policy) from None
    except httpx.InvalidURL as exc:
        raise ImageError(f"image {short_ref(ref)}: not a valid URL ({exc}); check it") from None
    finally:
        if own:
            await client.aclose()
