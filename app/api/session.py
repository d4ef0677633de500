"""Who may open the browser pages of ``dreads serve`` (``/runs/...``): the API key once, at
``/login``, then a session cookie.

The cookie holds an HMAC of a fixed label under ``DREADS_API_KEY``: nothing is stored on the
server, and changing the key ends every session. A bearer header works too (scripts). Without
an API key the pages are open, as the ``/v1`` routes are.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request

__all__ = ["COOKIE", "SESSION_S", "authorized", "safe_next", "session_token"]

COOKIE = "dreads_session"
#: How long a login lasts.
SESSION_S = 12 * 3600
_LABEL = b"dreads live page session v1"


def session_token(api_key: str) -> str:
    return hmac.new(api_key.encode(), _LABEL, hashlib.sha256).hexdigest()


def authorized(request: Request) -> bool:
    """The request carries the API key (bearer) or a session cookie made with it."""
    expected: str | None = request.app.state.api.config.api_key
    if not expected:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), expected.encode()):
        return True
    cookie = request.cookies.get(COOKIE, "")
    return hmac.compare_digest(cookie.encode(), session_token(expected).encode())


def safe_next(target: str | None) -> str:
    """A path on this server to go to after the login (never another site)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/runs"
