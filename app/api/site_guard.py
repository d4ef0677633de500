"""What a browser could do to ``dreads serve`` on a page it did not come from: refused.

Three checks, the same with an API key or without one:

- **Host** (every request but ``/health``): the ``Host`` header must be a name the server was
  started for (``ServeConfig.allowed_hosts``: loopback names, the bound address, ``*`` or
  ``*.example.org`` patterns from ``DREADS_ALLOWED_HOSTS``). A DNS-rebinding page, whose own
  name now points at this server, is answered 400 and reads nothing. Starlette's
  ``TrustedHostMiddleware`` decides; its answer is rewritten as one line that says what to set.
- **Origin** (POST, PUT, PATCH, DELETE): a request a browser sends from another site carries
  its ``Origin``; it must be this server's own (the ``Host`` it was sent to) or one of
  ``ServeConfig.allowed_origins`` (``DREADS_ALLOWED_ORIGINS``), else 403. ``Origin: null``
  (a sandboxed or privacy-stripped page) is foreign. A client that is not a browser sends no
  ``Origin`` and is not concerned.
- **Content type** (the same methods on ``/v1``): a body must be JSON
  (``application/json``, ``application/*+json``), JSON lines (``application/x-ndjson`` and its
  aliases) or ``multipart/form-data`` (``curl -F``, Jev's image uploads; a browser sends it
  cross-site only with an ``Origin``, refused above), else 415; ``text/plain`` and form
  encoding, which a page may send anywhere without asking, are refused. A client that must
  send another type says so with the header ``X-Dreads-Client`` (a browser cannot add it to a
  cross-site request without the server's consent, which this one never gives).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware

from app.api.middleware import ASGIApp, Receive, Scope, Send, send_error

__all__ = ["BODY_TYPES", "CLIENT_HEADER", "LOOPBACK_HOSTS", "HostGuard", "SiteGuard",
           "host_patterns"]

#: The names every server answers for: this machine's loopback.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")
#: The header that says "not a browser page" for a body of another content type.
CLIENT_HEADER = "x-dreads-client"
#: Content types a mutating ``/v1`` request may carry (lower case, without parameters).
BODY_TYPES = frozenset({"application/json", "application/x-ndjson", "application/jsonl",
                        "application/json-lines", "application/x-jsonlines",
                        "multipart/form-data"})
_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_HOST_FREE = frozenset({"/health"})  #: probes reach it by the pod's address
_PASSED = "dreads.host_ok"


def host_patterns(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` as Host patterns: lower case, without a port, IPv6 in brackets and bare,
    each once, loopback names first."""
    out: list[str] = list(LOOPBACK_HOSTS)
    for raw in names:
        name = raw.strip().lower()
        if not name:
            continue
        if ":" in name and not name.startswith("[") and name.count(":") > 1:  # bare IPv6
            name = f"[{name}]"
        elif name.startswith("[") and "]" in name:
            name = name[:name.index("]") + 1]
        elif ":" in name:
            name = name.split(":", 1)[0]
        for form in (name, name.strip("[]")):
            if form and form not in out:
                out.append(form)
    return tuple(out)


class HostGuard:
    """The Host check: ``TrustedHostMiddleware`` with ``allowed`` (``host_patterns``), its
    refusal answered as a one-line JSON error."""

    def __init__(self, app: ASGIApp, *, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = tuple(allowed)
        self._trusted = TrustedHostMiddleware(self._passed, allowed_hosts=list(self.allowed),
                                              www_redirect=False)

    async def _passed(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[_PASSED] = True
        await self.app(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in _HOST_FREE:
            await self.app(scope, receive, send)
            return
        answered = False

        async def refuse_instead(message: dict[str, object]) -> None:
            nonlocal answered
            if scope.get(_PASSED):
                await send(message)
            elif not answered:
                answered = True
                host = Headers(scope=scope).get("host", "")
                await send_error(send, 400, "invalid_request_error",
                                 f"this server does not answer for the Host {host[:100]!r}; "
                                 "reach it by a name it was started for, or add that name to "
                                 "DREADS_ALLOWED_HOSTS")

        await self._trusted(scope, receive, refuse_instead)  # type: ignore[arg-type]


class SiteGuard:
    """The Origin and content-type checks of mutating requests (the module's docstring)."""

    def __init__(self, app: ASGIApp, *, allowed_origins: Iterable[str] = (),
                 openai_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.allowed_origins = frozenset(
            said for o in allowed_origins if o.strip() and (said := _origin(o)) is not None)
        self.openai_paths = openai_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _MUTATING:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        await send_error(send, status, "invalid_request_error" if status == 415
                         else "permission_error", message,
                         openai=scope["path"] in self.openai_paths)

    def _refusal(self, scope: Scope, headers: Headers) -> tuple[int, str] | None:
        origin = headers.get("origin")
        if origin is not None and not self._own(origin, headers.get("host", "")):
            return 403, (f"requests from the web page at {origin[:100]!r} are refused: this "
                         "server takes writes from its own pages and clients that are not "
                         "browsers; add that origin to DREADS_ALLOWED_ORIGINS to allow it")
        if not scope["path"].startswith("/v1/") or CLIENT_HEADER in headers:
            return None
        kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if not kind or kind in BODY_TYPES or (kind.startswith("application/")
                                              and kind.endswith("+json")):
            return None
        return 415, (f"Content-Type {kind[:60]!r} is refused on {scope['method']} requests: "
                     "send application/json (application/x-ndjson for JSON lines, "
                     f"multipart/form-data for a file), or add the header {CLIENT_HEADER}: 1")

    def _own(self, origin: str, host: str) -> bool:
        said = _origin(origin)
        if said is None:  # not even a URL: no page of this server sent it
            return False
        if said in self.allowed_origins:
            return True
        netloc = said.partition("://")[2]  # "" for "null"
        return bool(netloc) and netloc == _without_default_port(host.strip().lower())


def _origin(value: str) -> str | None:
    """``scheme://host[:port]`` of an origin as compared (lower case, no default port); a value
    without both, as ``null``, as it is; None: one no URL parser reads (``http://[x``)."""
    try:
        parts = urlsplit(value.strip().lower())
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc:
        return value.strip().lower()
    return f"{parts.scheme}://{_without_default_port(parts.netloc)}"


def _without_default_port(netloc: str) -> str:
    for default in (":80", ":443"):
        if netloc.endswith(default):
            return netloc[: -len(default)]
    return netloc
