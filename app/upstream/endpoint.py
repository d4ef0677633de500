"""``DecisionEndpoint``: one request per decision to a decision endpoint, within a budget.

A run answered by a decision endpoint (``/v1/systemone``, Jev's shape; ``/v1/decisions``,
OpenAI's; or a registered source's route: ``app.engine.sources``) sends each decision, all its
questions, as one POST to the source's path; what the body holds is the source's business.
Hot path on aiohttp, as ``app.upstream.vllm``: one ``ClientSession`` per event loop, the body
sent as pre-encoded bytes.

Budget (per run, in this process): at most ``concurrency`` requests in flight and, with
``rps > 0``, requests started no closer than ``1/rps`` seconds apart.

Errors (aiohttp's translated in ``_post`` only):

- 429, 503 and 529 wait for their ``retry-after`` (every request of this endpoint pauses until
  then), else back off; refused or reset connections, timeouts and other 5xx back off
  (jittered, exponential, at most ``_MAX_BACKOFF_S``). Both are retried until ``give_up_s`` has
  passed since the request's first failure, then raise ``UpstreamUnavailable`` (kind
  ``throttled`` for a 429/529, else ``upstream_unreachable``, ``timeout`` or ``server_error``).
- 401/403 raise ``UpstreamUnauthorized`` at once (the key is ``DREADS_ANSWER_API_KEY``); a 404
  naming the model ``ModelNotServed``; other 4xx ``UpstreamRejected`` with the server's message.
- A 200 that is not a JSON object raises ``MalformedResponse``.

Example::

    endpoint = DecisionEndpoint("http://vllm:8000", "/v1/systemone", rps=20, concurrency=8)
    payload, latency_ms = await endpoint.ask(encode_body(systemone_request(decision, "dgemma")))
    await endpoint.aclose()
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp

from app.engine import redact_url
from app.errors import (
    ConfigError,
    ModelNotServed,
    UpstreamRejected,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)
from app.upstream.connector import tcp_connector
from app.upstream.http_errors import (
    UNAUTHORIZED,
    error_field,
    error_message,
    json_object,
    names_missing_model,
    retry_after_s,
)
from app.upstream.outage import OutageLog

__all__ = ["DecisionEndpoint", "endpoint_url"]

logger = logging.getLogger("dreads.upstream.endpoint")

_THROTTLED = frozenset({429, 529})
_SAYS_LATER = frozenset({429, 503, 529})
_MAX_BACKOFF_S = 5.0


def endpoint_url(base_url: str, path: str) -> str:
    """The route ``path`` (``/v1/...``) under ``base_url``: ``http://host:8000``, ``.../v1``
    and the full route all name the same endpoint.

    Raises:
        ConfigError: not an http(s) URL, or no path (a source that reads).
    """
    if not path:
        raise ConfigError("a run answered by reads has no decision endpoint")
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"--answer-url {base_url!r} is not a URL: pass http(s)://host:port "
                          f"of a server that answers {path}")
    url = base_url.rstrip("/")
    if url.endswith(path):
        return url
    return url + path.removeprefix("/v1") if url.endswith("/v1") else url + path


@dataclass
class _LoopState:
    loop: asyncio.AbstractEventLoop
    session: aiohttp.ClientSession
    in_flight: asyncio.Semaphore


class DecisionEndpoint:
    """A decision endpoint at one route, with a request budget. ``counts`` tallies the
    retryable answers met (``throttled``, ``unavailable``), for logs and benchmarks."""

    def __init__(self, base_url: str, path: str, *, api_key: str | None = None,
                 rps: float = 0.0, concurrency: int = 16, timeout_s: float = 120.0,
                 give_up_s: float = 300.0, backoff_s: float = 0.25) -> None:
        if concurrency < 1:
            raise ConfigError("answer_concurrency must be at least 1")
        self.url = endpoint_url(base_url, path)
        self.shown_url = redact_url(self.url)  #: the URL as errors and logs show it
        self.rps = rps
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.give_up_s = give_up_s
        self.backoff_s = backoff_s
        self.counts: Counter[str] = Counter()
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._next_start = 0.0  #: monotonic time the next request may start (rps pacing)
        self._paused_until = 0.0  #: a retry-after pauses every request of this endpoint
        self._state: _LoopState | None = None
        #: throttling or an outage: a line when it starts and one when it ends (DEBUG: each)
        self._outage = OutageLog(self.shown_url, logger, what="decision requests",
                                 level=logging.INFO)

    async def ask(self, body: bytes) -> tuple[dict[str, Any], float]:
        """POST one decision; (the decoded answer, latency in ms of the answered request).
        See the module docstring for what is retried and what is raised."""
        first_failure: float | None = None
        attempt = 0
        while True:
            sent_at = self._outage.now()
            try:
                answer = await self._send(body)
            except _Later as later:
                now = time.monotonic()
                first_failure = first_failure if first_failure is not None else now
                if now - first_failure >= self.give_up_s:
                    raise later.error(self.give_up_s) from None
                delay = later.wait_s if later.wait_s is not None else self._backoff(attempt)
                if later.wait_s is not None:
                    self._paused_until = max(self._paused_until, now + later.wait_s)
                attempt += 1
                self._outage.retrying(later.kind, later.message,
                                      f"retry {attempt} in {delay:.2f}s")
                await asyncio.sleep(delay)
                continue
            self._outage.succeeded(sent_at)
            return answer

    def _backoff(self, attempt: int) -> float:
        return random.uniform(0.5, 1.0) * min(_MAX_BACKOFF_S, self.backoff_s * 2.0 ** attempt)

    async def _send(self, body: bytes) -> tuple[dict[str, Any], float]:
        state = self._loop_state()
        async with state.in_flight:
            await self._pace()
            started = time.perf_counter()
            status, raw, headers = await self._post(state.session, body)
            latency_ms = (time.perf_counter() - started) * 1000.0
        return self._decode(status, raw, headers), latency_ms

    async def _pace(self) -> None:
        """Wait out a retry-after pause, then the rps budget's next start time."""
        while True:
            now = time.monotonic()
            wait = self._paused_until - now
            if self.rps > 0:
                slot = max(now, self._next_start)
                wait = max(wait, slot - now)
            if wait <= 0:
                if self.rps > 0:
                    self._next_start = max(now, self._next_start) + 1.0 / self.rps
                return
            await asyncio.sleep(wait)

    async def _post(self, session: aiohttp.ClientSession,
                    body: bytes) -> tuple[int, bytes, dict[str, str]]:
        """The one place aiohttp's exceptions become dreads errors."""
        try:
            async with session.post(self.url, data=body, headers=self._headers) as response:
                return response.status, await response.read(), dict(response.headers)
        except TimeoutError as exc:
            raise _Later(f"no answer within {self.timeout_s:g}s", "timeout") from exc
        except aiohttp.ClientConnectorError as exc:
            raise _Later(f"cannot connect: {exc.os_error}", "upstream_unreachable") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise _Later(f"connection failed: {exc!r}", "upstream_unreachable") from exc

    def _decode(self, status: int, raw: bytes, headers: dict[str, str]) -> dict[str, Any]:
        if status in UNAUTHORIZED and "Authorization" not in self._headers:
            raise UpstreamUnauthorized(
                f"the decision endpoint {self.shown_url} refused a request without an "
                f"API key ({status}: {error_message(raw)}): set DREADS_ANSWER_API_KEY to its "
                "key and DREADS_ANSWER_URL to this server (the key is sent to that server only)",
                status=status)
        if status in UNAUTHORIZED:
            raise UpstreamUnauthorized(
                f"the decision endpoint {self.shown_url} refused this client's API key "
                f"({status}: {error_message(raw)}): set DREADS_ANSWER_API_KEY to its key",
                status=status)
        if status in _SAYS_LATER or status >= 500:
            kind = "throttled" if status in _THROTTLED else "server_error"
            self.counts["throttled" if kind == "throttled" else "unavailable"] += 1
            wait = retry_after_s(headers) if status in _SAYS_LATER else None
            raise _Later(f"{status}: {error_message(raw)}", kind, status=status, wait_s=wait)
        if status == 404 and names_missing_model(raw):
            raise ModelNotServed(f"{self.shown_url} does not serve the run's model ({status}): "
                                 f"{error_message(raw)}", status=status, param="model")
        if status >= 400:
            param = error_field(raw, "param")
            raise UpstreamRejected(f"{self.shown_url} rejected the decision ({status}): "
                                   f"{error_message(raw)}", status=status,
                                   param=param if isinstance(param, str) else None)
        return json_object(raw, self.shown_url)

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._state
        if state is None or state.loop is not loop or state.session.closed:
            session = aiohttp.ClientSession(connector=tcp_connector(self.concurrency),
                                            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                                            raise_for_status=False)
            state = _LoopState(loop, session, asyncio.Semaphore(self.concurrency))
            self._state = state
        return state

    async def aclose(self) -> None:
        state, self._state = self._state, None
        if state is not None and state.loop is asyncio.get_running_loop() \
                and not state.session.closed:
            await state.session.close()


class _Later(Exception):
    """A failure worth retrying; ``wait_s`` is the server's retry-after when it gave one."""

    def __init__(self, message: str, kind: str, *, status: int | None = None,
                 wait_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status
        self.wait_s = wait_s

    def error(self, give_up_s: float) -> UpstreamUnavailable:
        return UpstreamUnavailable(f"the decision endpoint still fails after {give_up_s:g}s of "
                                   f"retries: {self.message}", kind=self.kind,
                                   status=self.status)
