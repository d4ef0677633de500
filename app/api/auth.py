"""Bearer-key authentication of the ``/v1`` routes (``DREADS_API_KEY``; off when unset).

Async, like every dependency here: FastAPI runs a plain ``def`` dependency in a worker
thread, a hop per request that costs more than the check.

As Jev answers: no ``Authorization`` header is 403 ``permission_error``; a wrong key is 401
``authentication_error``.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.errors import api_error

__all__ = ["require_key"]

_bearer = HTTPBearer(auto_error=False, description="DREADS_API_KEY, when the server sets one.")


async def require_key(request: Request, credentials: Annotated[
        HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    expected: str | None = request.app.state.api.config.api_key
    if not expected:
        return
    if credentials is None:
        raise api_error(403, "permission_error",
                        "Not authenticated: send 'Authorization: Bearer <key>' with the key "
                        "this server was started with (DREADS_API_KEY)")
    if not secrets.compare_digest(credentials.credentials.encode(), expected.encode()):
        raise api_error(401, "authentication_error", "Invalid API key")
