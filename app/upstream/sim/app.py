"""The simulator's ASGI app: vLLM's read routes plus ``/sim/*`` controls.

Routes: ``GET /health`` (200, empty), ``GET /v1/models`` (with ``max_model_len`` and
``canvas_length``), ``GET /version``, ``POST /v1/chat/completions``, ``POST /v1/completions``,
``GET /sim/stats`` (counters), ``POST /sim/down?seconds=N`` (503 on every model route for N
seconds), ``POST /sim/up``, ``POST /sim/reset`` (zero the counters).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qs

import orjson

from app.upstream.sim.capacity import BatchModel
from app.upstream.sim.faults import FaultPlan, FaultRates
from app.upstream.sim.options import SimOptions
from app.upstream.sim.scorer import AnswerKey, Row, ScoreOptions, Scorer
from app.upstream.sim.shapes import chat_response, completions_response, models_response, usage
from app.upstream.sim.tokens import PrefixCache, SimTokenizer, find_slots, load_sim_tokenizer
from app.upstream.sim.validate import ReadSpec, SimBadRequest, error_body, validate_read

__all__ = ["SimApp", "create_app"]

logger = logging.getLogger("dreads.sim")

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
_JSON = (b"content-type", b"application/json")


class _Reply(Exception):
    """Answer now with this status and JSON body."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dreads")
    except PackageNotFoundError:
        return "dev"


class SimApp:
    """State and routes of one simulator."""

    def __init__(self, options: SimOptions, tokenizer: SimTokenizer) -> None:
        self.options = options
        self.tokenizer = tokenizer
        self.vocab_size = options.vocab or tokenizer.vocab_size
        key = AnswerKey.load(options.key_path) if options.key_path else None
        score = ScoreOptions(options.noise, options.separation, options.miscalibration,
                             options.seed)
        self.scorer = Scorer(score, vocab_size=self.vocab_size, piece=tokenizer.piece, key=key)
        rates = FaultRates(options.fail_rate, options.hang_rate, options.malformed_rate,
                           options.low_mass_rate)
        self.faults = FaultPlan(rates, seed=options.seed)
        self.batch = BatchModel(step_ms=options.step_ms, max_batch=options.max_batch)
        self.prefix = PrefixCache()
        self.counters: Counter[str] = Counter()
        self.bodies: deque[bytes] = deque(maxlen=max(1, options.record_bodies))
        self.created = int(time.time())
        self.version = f"dreads-sim {_version()}"
        self.engine_rows = _engine_rows(options)

    # -- ASGI ---------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        try:
            status, payload = await self._route(scope, body, receive)
        except _Reply as reply:
            status, payload = reply.status, reply.body
        data = b"" if payload is None else orjson.dumps(payload)
        headers = [(b"content-length", str(len(data)).encode())]
        if payload is not None:
            headers.append(_JSON)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.batch.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _route(self, scope: Scope, body: bytes, receive: Receive) -> tuple[int, Any]:
        method, path = scope["method"], scope["path"]
        if path.startswith("/sim/"):
            return self._control(method, path, scope.get("query_string", b""))
        if self.faults.is_down:
            self.counters["down_503"] += 1
            raise _Reply(503, error_body("dreads sim is down (POST /sim/up)", None, 503))
        if method == "GET":
            return self._get(path)
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            return await self._read(body, chat=path == "/v1/chat/completions", receive=receive)
        raise _Reply(404, error_body(f"unknown route {method} {path}", None, 404))

    def _get(self, path: str) -> tuple[int, Any]:
        if path == "/health":
            return 200, None
        if path == "/v1/models":
            opts = self.options
            return 200, models_response(opts.model, self.created, opts.max_model_len,
                                        opts.canvas_length)
        if path == "/version":
            return 200, {"version": self.version}
        raise _Reply(404, error_body(f"unknown route GET {path}", None, 404))

    def _control(self, method: str, path: str, query: bytes) -> tuple[int, Any]:
        if method == "GET" and path == "/sim/stats":
            return 200, self.stats()
        if method == "POST" and path == "/sim/down":
            seconds = float(parse_qs(query.decode()).get("seconds", ["3600"])[0])
            self.faults.down(seconds)
            logger.info("[dreads sim] down for %.1fs (503 on every model route)", seconds)
            return 200, {"down_for_s": seconds}
        if method == "POST" and path == "/sim/up":
            self.faults.down(0)
            return 200, {"down_for_s": 0}
        if method == "POST" and path == "/sim/reset":
            self.counters.clear()
            self.faults.injected.clear()
            return 200, self.stats()
        raise _Reply(404, {"error": {"message": f"unknown route {method} {path}"}})

    def stats(self) -> dict[str, Any]:
        """Counters: requests, reads answered, rejected, faults injected by kind, steps."""
        return {
            **{k: self.counters[k] for k in ("requests", "reads", "rejected", "down_503",
                                             "abandoned")},
            "faults": {k: self.faults.injected[k]
                       for k in ("fail", "hang", "malformed", "low_mass")},
            "steps": self.batch.steps,
            "down": self.faults.is_down,
        }

    # -- reads --------------------------------------------------------------------------------
    async def _read(self, raw: bytes, *, chat: bool, receive: Receive) -> tuple[int, Any]:
        self.counters["requests"] += 1
        if self.options.record_bodies:
            self.bodies.append(raw)
        body, spec = self._validated(raw, chat=chat)
        pairs, prompt_ids = self._prompt(body, chat=chat)
        self._check_context(len(prompt_ids), spec.width)
        fault = self.faults.draw(raw)
        if fault == "fail":
            raise _Reply(500, error_body("dreads sim: injected internal server error", None, 500))
        if fault == "hang":
            if await _wait_disconnect(receive, self.options.hang_s):
                self.counters["abandoned"] += 1  # the client gave up on the read
            raise _Reply(504, error_body("dreads sim: injected hang ended", None, 504))
        await self.batch.admit()
        self.counters["reads"] += 1
        rows = await self.engine_rows(body, spec, chat=chat) if self.engine_rows else None
        return 200, self._answer(body, spec, pairs, prompt_ids, chat=chat, fault=fault,
                                 rows=rows)

    def _prompt(self, body: dict[str, Any], *, chat: bool
                ) -> tuple[tuple[tuple[str, str], ...], tuple[int, ...]]:
        """(role, text) pairs and prompt ids of a read."""
        if chat:
            pairs = _message_pairs(body["messages"])
            return pairs, tuple(self.tokenizer.prompt_ids(pairs))
        prompt = body["prompt"]
        prompt_ids = tuple(prompt) if isinstance(prompt, list) else ()
        return tuple((m["role"], m["content"])
                     for m in self.tokenizer.messages_from_prompt(prompt_ids)), prompt_ids

    def _check_context(self, n_prompt: int, width: int) -> None:
        """vLLM refuses a prompt that, with the canvas, does not fit in max_model_len."""
        limit = self.options.max_model_len
        if n_prompt + width > limit:
            self.counters["rejected"] += 1
            raise _Reply(400, error_body(
                f"This model's maximum context length is {limit} tokens. However, your request "
                f"has {n_prompt} input tokens and a canvas of {width}. Please reduce the "
                "length of the input messages.", "input_tokens"))

    def _validated(self, raw: bytes, *, chat: bool) -> tuple[dict[str, Any], ReadSpec]:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self.counters["rejected"] += 1
            raise _Reply(400, error_body(f"the body is not valid JSON: {exc}", None)) from exc
        try:
            if isinstance(body, dict) and body.get("model") != self.options.model:
                raise _Reply(404, error_body(
                    f"The model `{body.get('model')}` does not exist.", "model", 404))
            spec = validate_read(body, chat=chat, canvas_length=self.options.canvas_length,
                                 vocab_size=self.vocab_size)
        except SimBadRequest as exc:
            self.counters["rejected"] += 1
            raise _Reply(400, error_body(exc.message, exc.param)) from exc
        except _Reply:
            self.counters["rejected"] += 1
            raise
        return body, spec

    def _answer(self, body: dict[str, Any], spec: ReadSpec,
                pairs: tuple[tuple[str, str], ...], prompt_ids: tuple[int, ...], *,
                chat: bool, fault: str | None, rows: list[Row] | None = None
                ) -> dict[str, Any]:
        parsed = _prompt_parts(pairs)
        known = set(parsed[1]) if parsed is not None else None
        slot_ids = find_slots(self.tokenizer, spec.canvas, spec.rows, spec.pinned, known)
        slots = {p: _question(pairs, parsed, cid) for p, cid in slot_ids.items()}
        if rows is None:
            rows = self.scorer.rows(spec.canvas, spec.rows, spec.logprob_ids, slots, fault)
        cached = self.prefix.lookup_and_insert(prompt_ids)
        info = usage(len(prompt_ids), len(rows), cached)
        text = "".join(self.tokenizer.piece(r.argmax_id) for r in rows)
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-sim{self.counters['reads']}"
        build = chat_response if chat else completions_response
        return build(request_id, self.options.model, self.created, rows, text, info)


def _message_pairs(messages: Any) -> tuple[tuple[str, str], ...]:
    try:
        return tuple((str(m["role"]), str(m["content"])) for m in messages)
    except (TypeError, KeyError) as exc:
        raise _Reply(400, error_body("every message needs role and content (text)",
                                     "messages")) from exc


def _question(pairs: tuple[tuple[str, str], ...], parsed: tuple[str, dict[str, str]] | None,
              canvas_id: str) -> tuple[str, str]:
    """(state text, instructions) of a slot; for a prompt dreads did not build, the prompt."""
    if parsed is None:
        return "\n".join(c for _, c in pairs), canvas_id
    state_text, questions = parsed
    return state_text, questions.get(canvas_id, canvas_id)


@lru_cache(maxsize=4096)
def _prompt_parts(pairs: tuple[tuple[str, str], ...]) -> tuple[str, dict[str, str]] | None:
    from app.engine import parse_messages

    try:
        parts = parse_messages([{"role": r, "content": c} for r, c in pairs])
    except Exception:  # any prompt dreads did not build
        return None
    return parts.state_text, dict(parts.questions)


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _wait_disconnect(receive: Receive, limit_s: float) -> bool:
    """Until the client disconnects (True) or ``limit_s`` passes (False)."""
    async def _until_gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    try:
        await asyncio.wait_for(_until_gone(), timeout=limit_s)
    except TimeoutError:
        return False
    return True


def _engine_rows(options: SimOptions) -> Any:
    """``--engine transformers``: rows from the in-process engine (needs the engine extra)."""
    if not options.engine_model:
        return None
    from app.upstream.transformers_engine.sim_rows import EngineRows

    return EngineRows(options.engine_model, device=options.engine_device,
                      dtype=options.engine_dtype, canvas_length=options.canvas_length)


def create_app(options: SimOptions) -> SimApp:
    """The simulator app for ``options`` (loads the tokenizer and the answer key)."""
    return SimApp(options, load_sim_tokenizer(options.tokenizer))
