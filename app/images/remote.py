"""http(s) images: one GET, following redirects, the body read up to the size limit."""

from __future__ import annotations

import httpx

from app.errors import ImageError, ImageUnreachable
from app.images.policy import ImagePolicy
from app.images.refs import short_ref

__all__ = ["get_image", "get_image_async"]


def _status_error(ref: str, response: httpx.Response) -> ImageUnreachable:
    return ImageUnreachable(f"image {short_ref(ref)}: the server answered HTTP "
                            f"{response.status_code} {response.reason_phrase}; check the URL",
                            status=response.status_code)


def _transport_error(ref: str, exc: httpx.HTTPError, timeout_s: float) -> ImageUnreachable:
    if isinstance(exc, httpx.TimeoutException):
        return ImageUnreachable(f"image {short_ref(ref)}: no answer within {timeout_s:g} s; "
                                "check the URL, or raise DREADS_IMAGE_TIMEOUT")
    return ImageUnreachable(f"image {short_ref(ref)}: unreachable ({type(exc).__name__}: "
                            f"{exc}); check the URL and that its server is up")


def _too_large(ref: str, policy: ImagePolicy) -> ImageError:
    return ImageError(f"image {short_ref(ref)}: over the limit of {policy.max_bytes:,} bytes; "
                      "shrink it or raise DREADS_IMAGE_MAX_BYTES")


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

    def __init__(self, ref: str, policy: ImagePolicy, response: httpx.Response) -> None:
        if response.is_error:
            raise _status_error(ref, response)
        declared = _declared_length(response)
        if declared is not None and declared > policy.max_bytes:
            raise _too_large(ref, policy)
        self.ref, self.policy, self.response = ref, policy, response
        self.data = bytearray()

    def add(self, piece: bytes) -> None:
        self.data += piece
        if len(self.data) > self.policy.max_bytes:
            raise _too_large(self.ref, self.policy)

    def result(self) -> tuple[bytes, str | None]:
        return bytes(self.data), _media_type(self.response)


def get_image(ref: str, policy: ImagePolicy, client: httpx.Client | None = None
              ) -> tuple[bytes, str | None]:
    """The body of ``ref`` and its media type (``Content-Type``; None: none given).

    Raises:
        ImageUnreachable: refused, timed out, or an HTTP error status.
        ImageError: the body is over ``policy.max_bytes``.
    """
    own = client is None
    client = client or httpx.Client(timeout=policy.timeout_s, follow_redirects=True)
    try:
        with client.stream("GET", ref, timeout=policy.timeout_s) as response:
            body = _Body(ref, policy, response)
            for piece in response.iter_bytes():
                body.add(piece)
            return body.result()
    except httpx.HTTPError as exc:
        raise _transport_error(ref, exc, policy.timeout_s) from None
    finally:
        if own:
            client.close()


async def get_image_async(ref: str, policy: ImagePolicy,
                          client: httpx.AsyncClient | None = None) -> tuple[bytes, str | None]:
    """``get_image`` on an event loop."""
    own = client is None
    client = client or httpx.AsyncClient(timeout=policy.timeout_s, follow_redirects=True)
    try:
        async with client.stream("GET", ref, timeout=policy.timeout_s) as response:
            body = _Body(ref, policy, response)
            async for piece in response.aiter_bytes():
                body.add(piece)
            return body.result()
    except httpx.HTTPError as exc:
        raise _transport_error(ref, exc, policy.timeout_s) from None
    finally:
        if own:
            await client.aclose()
