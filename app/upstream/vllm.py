"""``VllmUpstream``: reads over HTTP to vLLM (or ``dreads sim``).

Hot path on aiohttp: one ``ClientSession`` per event loop (made lazily inside the running loop),
a connector sized to the in-flight bound, a semaphore bounding reads in flight, the body sent as
the pre-encoded bytes of ``encode_body`` (byte-identical on every retry), responses parsed with
orjson and ``parse_response``. Control plane (``fingerprint``, ``wait_ready``) on httpx.

Errors: aiohttp exceptions are translated in ``_post`` only. Connection refused/reset, timeouts
and 5xx are retried with jittered exponential backoff (logged as an outage: a line when reads
start failing and one when they succeed again, ``app.upstream.outage``; each retry at DEBUG),
then raise ``UpstreamUnavailable``
(kind ``upstream_unreachable``, ``timeout`` or ``server_error``). 4xx raises ``UpstreamRejected``
at once with vLLM's message; 401/403 (a missing or wrong ``--api-key``, on the control plane as
on reads) ``UpstreamUnauthorized``. A bad body raises ``MalformedResponse``.

With ``api_key`` (``DREADS_UPSTREAM_API_KEY``) every request carries ``Authorization: Bearer``.
``max_model_len`` is what ``/v1/models`` reported, once it has been asked (None before).

Example::

    upstream = VllmUpstream("http://127.0.0.1:8001", model="dgemma", canvas_length=320)
    await upstream.wait_ready(timeout_s=600, probe=probe_request)
    result = await upstream.read(request)
    await upstream.aclose()
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import orjson

from app.engine import encode_body, parse_response, redact_url
from app.engine.invariance import (
    SERVER_INFO_PATH,
    batch_invariance,
    observed_batch_invariance,
)
from app.engine.types import (
    SIM,
    Endpoint,
    ReadRequest,
    ReadResult,
    ServerFingerprint,
    is_simulator,
)
from app.errors import (
    MalformedResponse,
    ModelNotServed,
    UpstreamRejected,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)
from app.upstream.base import WaitProgress
from app.upstream.connector import tcp_connector
from app.upstream.http_errors import (
    UNAUTHORIZED,
    error_field,
    error_message,
    json_object,
    names_missing_model,
)
from app.upstream.outage import OutageLog

__all__ = ["VllmUpstream"]

logger = logging.getLogger("dreads.upstream")

_PATHS = {Endpoint.CHAT: "/v1/chat/completions", Endpoint.COMPLETIONS: "/v1/completions"}
_HEADERS = {"Content-Type": "application/json"}
_MAX_BACKOFF_S = 30.0
#: 4xx a proxy in front of vLLM may answer that say "later", not "never".
_TRANSIENT_4XX = frozenset({408, 429})
#: ``/server_info`` gathers the host's environment on its first call: do not wait long for it.
_SERVER_INFO_S = 5.0


@dataclass
class _LoopState:
    """What is bound to one event loop: the session and the in-flight bound."""

    loop: asyncio.AbstractEventLoop
    session: aiohttp.ClientSession
    in_flight: asyncio.Semaphore


class VllmUpstream:
    """The ``Upstream`` over vLLM's OpenAI-compatible HTTP API."""

    def __init__(self, base_url: str, *, model: str, canvas_length: int,
                 max_in_flight: int = 256, timeout_s: float = 60.0, retries: int = 4,
                 backoff_s: float = 0.5, engine: str = "vllm", api_key: str | None = None,
                 batch_invariant: bool | None = None,
                 on_close: Callable[[], None] | None = None) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.shown_url = redact_url(self.base_url)  #: as messages and logs show it
        self.model = model
        self.canvas_length = canvas_length
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self.retries = max(0, retries)
        self.backoff_s = backoff_s
        self.engine = engine
        #: what the operator declared (``DREADS_UPSTREAM_BATCH_INVARIANT``); None: nothing
        self.batch_invariant = batch_invariant
        self.max_model_len: int | None = None
        self._headers = dict(_HEADERS)
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._on_close = on_close
        self._state: _LoopState | None = None
        #: retries during an outage: a line when it starts and one when it ends (DEBUG: each)
        self._outage = OutageLog(self.shown_url, logger)

    # -- hot path -----------------------------------------------------------------------------
    async def read(self, request: ReadRequest) -> ReadResult:
        """Send one read; retry transient failures. See the module docstring for errors."""
        return await self._read(request, retries=self.retries)

    async def _read(self, request: ReadRequest, *, retries: int) -> ReadResult:
        url = self.base_url + _PATHS[Endpoint(request.endpoint)]
        body = encode_body(request.body)
        for attempt in range(retries + 1):
            sent_at = self._outage.now()
            try:
                payload, latency_ms = await self._send(url, body)
            except UpstreamUnavailable as exc:
                if attempt >= retries:
                    raise UpstreamUnavailable(
                        f"{exc.message} (gave up after {attempt + 1} attempt(s))",
                        kind=exc.kind, status=exc.status) from exc
                delay = self._backoff(attempt)
                self._outage.retrying(exc.kind, exc.message,
                                      f"retry {attempt + 1}/{retries} in {delay:.2f}s")
                await asyncio.sleep(delay)
                continue
            self._outage.succeeded(sent_at)
            return parse_response(request.endpoint, payload, request.slots,
                                  latency_ms=latency_ms)
        raise AssertionError("unreachable")  # pragma: no cover

    def _backoff(self, attempt: int) -> float:
        """Full-jitter exponential backoff."""
        return random.uniform(0.5, 1.0) * min(_MAX_BACKOFF_S, self.backoff_s * 2.0**attempt)

    async def _send(self, url: str, body: bytes) -> tuple[dict[str, Any], float]:
        """The decoded answer and its latency (queueing for an in-flight slot excluded)."""
        state = self._loop_state()
        async with state.in_flight:
            started = time.perf_counter()
            status, raw = await self._post(state.session, url, body)
            latency_ms = (time.perf_counter() - started) * 1000.0
        return _decode(status, raw), latency_ms

    async def _post(self, session: aiohttp.ClientSession, url: str,
                    body: bytes) -> tuple[int, bytes]:
        """The one place aiohttp's exceptions become dreads errors."""
        try:
            async with session.post(url, data=body, headers=self._headers) as response:
                return response.status, await response.read()
        except TimeoutError as exc:
            raise UpstreamUnavailable(
                f"no answer from {url} within {self.timeout_s:g}s", kind="timeout") from exc
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamUnavailable(
                f"cannot connect to {url}: {exc.os_error}; is vLLM (or dreads sim) running "
                "there?", kind="upstream_unreachable") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamUnavailable(
                f"connection to {url} failed: {exc!r}", kind="upstream_unreachable") from exc

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._state
        if state is None or state.loop is not loop or state.session.closed:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            session = aiohttp.ClientSession(connector=tcp_connector(self.max_in_flight),
                                            timeout=timeout,
                                            raise_for_status=False)
            state = _LoopState(loop, session, asyncio.Semaphore(self.max_in_flight))
            self._state = state
        return state

    # -- control plane ------------------------------------------------------------------------
    async def fingerprint(self) -> ServerFingerprint:
        """Served model id and ``max_model_len`` (``/v1/models``), version (``/version``),
        batch invariance (``/server_info`` where served, else as declared)."""
        async with self._control_client() as client:
            entry = await self._served_entry(client)
            version = await _version(client)
            observed = await _observed_invariance(client)
        engine = SIM if is_simulator(version=version) else self.engine
        canvas = entry.get("canvas_length")
        invariant, invariant_from = batch_invariance(observed, self.batch_invariant)
        return ServerFingerprint(
            engine=engine,
            model_id=str(entry.get("id", self.model)),
            max_model_len=entry.get("max_model_len"),
            version=version,
            canvas_length=int(canvas) if isinstance(canvas, int) else self.canvas_length,
            batch_invariant=invariant, batch_invariant_from=invariant_from,
        )

    async def wait_ready(self, *, timeout_s: float, probe: ReadRequest | None = None,
                         progress: WaitProgress | None = None) -> None:
        """Poll ``/v1/models`` until it lists a model, then (if given) read ``probe`` once;
        after each try that failed, tell ``progress`` the seconds waited and why.

        Raises:
            UpstreamUnavailable: not ready within ``timeout_s``.
            UpstreamRejected: the probe read was refused (a setting does not match the server).
        """
        deadline = time.monotonic() + timeout_s
        started = time.monotonic()
        last_error = "no answer yet"
        next_log = started
        async with self._control_client(timeout_s=min(10.0, max(1.0, timeout_s))) as client:
            while time.monotonic() < deadline:
                last_error = await self._ready_once(client, probe)
                if not last_error:
                    logger.info("upstream %s ready after %.1fs", self.shown_url,
                                time.monotonic() - started)
                    return
                if progress is not None:
                    progress(time.monotonic() - started, last_error)
                if time.monotonic() >= next_log:
                    logger.info("waiting for upstream %s (%.0fs): %s", self.shown_url,
                                time.monotonic() - started, last_error)
                    next_log = time.monotonic() + 5.0
                await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        raise UpstreamUnavailable(
            f"upstream {self.shown_url} not ready after {timeout_s:g}s ({last_error}); check the "
            "URL, that vLLM finished loading the model, and the served model name",
            kind="timeout")

    async def _ready_once(self, client: httpx.AsyncClient, probe: ReadRequest | None) -> str:
        """'' when ready, else why not."""
        try:
            await self._served_entry(client)
        except UpstreamUnavailable as exc:  # UpstreamUnauthorized is not worth waiting on
            return exc.message
        if probe is None:
            return ""
        try:
            await self._read(probe, retries=0)
        except (UpstreamUnavailable, MalformedResponse) as exc:
            return f"probe read failed: {exc.message}"
        return ""

    async def _served_entry(self, client: httpx.AsyncClient) -> dict[str, Any]:
        obj = await _get_json(client, "/v1/models")
        data = obj.get("data") if isinstance(obj, dict) else None
        if not data:
            raise UpstreamUnavailable(f"{self.shown_url}/v1/models lists no model yet")
        for entry in data:
            if entry.get("id") == self.model:
                limit = entry.get("max_model_len")
                self.max_model_len = int(limit) if isinstance(limit, int) else None
                return dict(entry)
        served = ", ".join(str(e.get("id")) for e in data)
        raise UpstreamRejected(
            f"{self.shown_url} serves {served}, not {self.model!r}: pass --model {served} "
            "(or DREADS_MODEL)", status=404, param="model")

    def _control_client(self, timeout_s: float = 10.0) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s,
                                 headers=self._headers)

    async def aclose(self) -> None:
        state, self._state = self._state, None
        same_loop = state is not None and state.loop is asyncio.get_running_loop()
        if state is not None and same_loop and not state.session.closed:
            await state.session.close()
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close()


def _decode(status: int, raw: bytes) -> dict[str, Any]:
    if status in UNAUTHORIZED:
        raise UpstreamUnauthorized.answered(status, error_message(raw))
    if status >= 500 or status in _TRANSIENT_4XX:
        raise UpstreamUnavailable(f"server error {status}: {error_message(raw)}",
                                  kind="server_error", status=status)
    if status == 404 and names_missing_model(raw):
        raise ModelNotServed(f"not served here ({status}): {error_message(raw)}", status=status,
                             param="model")
    if status >= 400:
        param = error_field(raw, "param")
        raise UpstreamRejected(f"rejected ({status}): {error_message(raw)}", status=status,
                               param=param if isinstance(param, str) else None)
    return json_object(raw, "the server")


async def _get_json(client: httpx.AsyncClient, path: str) -> Any:
    """The one place httpx's exceptions become dreads errors."""
    try:
        response = await client.get(path)
    except httpx.TimeoutException as exc:
        raise UpstreamUnavailable(f"GET {path} timed out", kind="timeout") from exc
    except httpx.HTTPError as exc:
        raise UpstreamUnavailable(
            f"cannot reach {redact_url(str(client.base_url))}{path}: "
            f"{redact_url(repr(exc))}") from exc
    if response.status_code in UNAUTHORIZED:
        raise UpstreamUnauthorized.answered(response.status_code, error_message(response.content))
    if response.status_code != 200:
        raise UpstreamUnavailable(f"GET {path} answered {response.status_code}",
                                  kind="server_error", status=response.status_code)
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise UpstreamUnavailable(f"GET {path} did not answer JSON") from exc


async def _version(client: httpx.AsyncClient) -> str | None:
    try:
        obj = await _get_json(client, "/version")
    except UpstreamUnavailable:
        return None
    version = obj.get("version") if isinstance(obj, dict) else None
    return str(version) if version is not None else None


async def _observed_invariance(client: httpx.AsyncClient) -> bool | None:
    """What ``/server_info`` says (vLLM serves it in its development mode only), else None."""
    try:
        obj = await asyncio.wait_for(_get_json(client, SERVER_INFO_PATH), _SERVER_INFO_S)
    except (UpstreamUnavailable, UpstreamRejected, TimeoutError):
        return None
    return observed_batch_invariance(obj)
