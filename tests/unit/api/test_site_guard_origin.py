"""An ``Origin`` header no URL parser reads is a foreign one (403), never a 500."""

from __future__ import annotations

import httpx
from starlette.responses import PlainTextResponse

from app.api.middleware import Receive, Scope, Send
from app.api.site_guard import SiteGuard


async def _ok(scope: Scope, receive: Receive, send: Send) -> None:
    await PlainTextResponse("written")(scope, receive, send)


async def test_an_unparsable_origin_is_refused_as_foreign() -> None:
    guard = SiteGuard(_ok, allowed_origins=("https://app.example.org", "http://[bad"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard),
                                 base_url="http://localhost:8000") as client:
        for origin in ("http://[x", "http://[::1"):
            refused = await client.post("/v1/runs/victim/cancel", headers={"Origin": origin})
            assert refused.status_code == 403, origin
            assert "DREADS_ALLOWED_ORIGINS" in refused.text
        own = await client.post("/v1/runs/victim/cancel",
                                headers={"Origin": "http://localhost:8000"})
        assert own.status_code == 200
        allowed = await client.post("/v1/runs/victim/cancel",
                                    headers={"Origin": "https://app.example.org"})
        assert allowed.status_code == 200
