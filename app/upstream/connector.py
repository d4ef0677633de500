"""The connection pool of the HTTP clients of ``app.upstream`` (a vLLM server, a decision
endpoint): one ``aiohttp`` connector per event loop, bounded to the client's concurrency."""

from __future__ import annotations

import aiohttp

__all__ = ["KEEPALIVE_S", "tcp_connector"]

#: How long an idle connection is kept. vLLM (uvicorn) drops idle keep-alive connections after
#: 5 s; ours go first, so a request never lands on a connection the server is closing.
KEEPALIVE_S = 4.0
_DNS_CACHE_S = 300


def tcp_connector(limit: int) -> aiohttp.TCPConnector:
    """A connector of at most ``limit`` connections (all to one host)."""
    return aiohttp.TCPConnector(limit=limit, limit_per_host=limit, keepalive_timeout=KEEPALIVE_S,
                                ttl_dns_cache=_DNS_CACHE_S)
