"""Pure ASGI middleware of ``dreads serve``.

- ``RequestContext``: a request id (``req_<32 hex>``) on every response, as ``x-request-id``
  and ``x-typesafe-request-id``, and ``server-timing: total;dur=<ms>``.
- ``BodyGuard``: decodes ``Content-Encoding`` gzip, deflate and zstd (what Jev clients send),
  refuses other encodings (415), and answers 413 once the decoded body passes its limit, before
  the route has read it all, so a compressed bomb costs at most the limit. On OpenAI's routes
  (``openai_paths``) these answers are OpenAI's error object.
"""

from __future__ import annotations

import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

import orjson
from starlette.datastructures import Headers, MutableHeaders

__all__ = ["BodyGuard", "RequestContext"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MIB = 1024 * 1024  #: bytes in a MiB, as the limits are set
_NO_BODY = {"GET", "HEAD", "OPTIONS", "DELETE"}


class RequestContext:
    """Request id and total time on every response; the id is ``request.state.request_id``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = f"req_{uuid.uuid4().hex}"
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()

        async def send_with_context(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.append("x-request-id", request_id)
                headers.append("x-typesafe-request-id", request_id)
                elapsed_ms = (time.perf_counter() - started) * 1000.0
                headers.append("server-timing", f"total;dur={elapsed_ms:.1f}")
            await send(message)

        await self.app(scope, receive, send_with_context)


class _Decoder(Protocol):
    def feed(self, data: bytes, limit: int) -> bytes:
        """Decoded bytes of ``data``, at most ``limit`` (more means the body is too large)."""
        ...


class _Identity:
    def feed(self, data: bytes, limit: int) -> bytes:
        return data


class _Zlib:
    def __init__(self, wbits: int) -> None:
        self._d = zlib.decompressobj(wbits)

    def feed(self, data: bytes, limit: int) -> bytes:
        return self._d.decompress(data, max(1, limit))


class _Zstd:
    def __init__(self) -> None:
        from backports.zstd import ZstdDecompressor

        self._d = ZstdDecompressor()

    def feed(self, data: bytes, limit: int) -> bytes:
        return self._d.decompress(data, max_length=max(1, limit)) if data else b""


_DECODERS: dict[str, Callable[[], _Decoder]] = {
    "identity": _Identity,
    "gzip": lambda: _Zlib(16 + zlib.MAX_WBITS),
    "x-gzip": lambda: _Zlib(16 + zlib.MAX_WBITS),
    "deflate": lambda: _Zlib(zlib.MAX_WBITS),
    "zstd": _Zstd,
}


async def send_error(send: Send, status: int, error_type: str, message: str, *,
                     openai: bool = False) -> None:
    """Jev's error body, or OpenAI's error object (``openai``: an OpenAI route)."""
    if openai:
        from app.api.openai_shapes import openai_error_body

        content: Any = openai_error_body(status, message, error_type)
    else:
        content = {"detail": {"error_type": error_type, "message": message}}
    body = orjson.dumps(content)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class BodyGuard:
    """Decode and bound request bodies; ``upload_paths`` (POST) get ``max_upload_bytes``."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, max_upload_bytes: int,
                 upload_paths: frozenset[str] = frozenset(),
                 openai_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.openai_paths = openai_paths
        self.max_bytes = max_bytes
        self.max_upload_bytes = max_upload_bytes
        self.upload_paths = upload_paths

    def _limit(self, scope: Scope) -> int:
        return self.max_upload_bytes if scope["path"] in self.upload_paths else self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _NO_BODY:
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        openai = scope["path"] in self.openai_paths
        headers = Headers(scope=scope)
        encoding = headers.get("content-encoding", "identity").strip().lower() or "identity"
        if encoding not in _DECODERS:
            await send_error(send, 415, "invalid_request_error",
                             f"Content-Encoding {encoding!r} is not supported; send the body "
                             "plain, or as gzip, deflate or zstd", openai=openai)
            return
        declared = headers.get("content-length")
        if encoding == "identity" and declared and declared.isdigit() and int(declared) > limit:
            await send_error(send, 413, "request_too_large", _too_large(limit, scope),
                             openai=openai)
            return
        await _Guarded(self.app, scope, receive, send, _DECODERS[encoding](), limit,
                       openai=openai).run()


def _too_large(limit: int, scope: Scope) -> str:
    setting = ("DREADS_API_MAX_UPLOAD_MB" if scope["path"].startswith("/v1/runs")
               else "DREADS_API_MAX_BODY_MB")
    return (f"the request body is over this server's limit of {limit / MIB:g} MiB "
            f"(decoded); send less, or raise {setting}")


class _Guarded:
    """One request: count decoded bytes; past the limit, answer 413 instead of the route."""

    def __init__(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send,
                 decoder: _Decoder, limit: int, *, openai: bool = False) -> None:
        self.app, self.scope, self._receive, self._send = app, scope, receive, send
        self.openai = openai
        self.decoder, self.limit = decoder, limit
        self.seen = 0
        self.refusal: tuple[int, str, str] | None = None
        self.answered = False

    async def run(self) -> None:
        await self.app(self.scope, self.receive, self.send)

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] != "http.request" or self.refusal is not None:
            return message
        try:
            body = self.decoder.feed(message.get("body", b""), self.limit - self.seen + 1)
        except (zlib.error, ValueError, OSError) as exc:
            return self._refuse(400, "invalid_request_error",
                                f"the body could not be decoded as its Content-Encoding says: "
                                f"{exc}")
        self.seen += len(body)
        if self.seen > self.limit:
            return self._refuse(413, "request_too_large", _too_large(self.limit, self.scope))
        return {**message, "body": body}

    def _refuse(self, status: int, error_type: str, text: str) -> Message:
        self.refusal = (status, error_type, text)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(self, message: Message) -> None:
        if self.refusal is None:
            await self._send(message)
            return
        if message["type"] == "http.response.start" and not self.answered:
            self.answered = True
            await send_error(self._send, *self.refusal, openai=self.openai)
