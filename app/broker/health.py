"""Can the broker take writes now? What ``dreads worker``'s supervisor asks while it waits to
start again a Celery worker that died.

A Redis at ``maxmemory`` with ``noeviction`` still answers ``PING`` but refuses every write
that needs memory (``OutOfMemoryError``), and a Celery worker cannot start or consume on it;
so the check is one small write with a short expiry. A broker that is not Redis is not asked
(None: unknown).
"""

from __future__ import annotations

__all__ = ["HEALTH_KEY", "broker_writable"]

#: The key the check writes (expires in a minute).
HEALTH_KEY = "dreads:broker:writable"
_TIMEOUT_S = 2.0


def broker_writable(url: str) -> bool | None:
    """True when the Redis at ``url`` took a small write; False when it refused it or did not
    answer; None for a broker that is not Redis."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return None
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=_TIMEOUT_S,
                                      socket_connect_timeout=_TIMEOUT_S)
        try:
            return bool(client.set(HEALTH_KEY, b"1", ex=60))
        finally:
            client.close()
    except Exception:  # any redis error (refused, OOM, timeout): not writable now
        return False
