"""The simulator's ASGI app: vLLM 0.33's read routes plus ``/sim/*`` controls.

Routes: ``GET /health`` (200, empty), ``GET /v1/models`` (with ``max_model_len``), ``GET
/version``, ``GET /server_info`` (vLLM's development route; only ``vllm_env`` with
``VLLM_BATCH_INVARIANT``: true, since the synthetic scorer's rows are a function of the request
alone, whatever it is batched with; false with ``--engine transformers``, which batches reads
into one forward), ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST
/v1/systemone`` and ``POST /v1/decisions`` (vLLM's own decision reader: ``decisions.py``),
``GET /metrics`` (vLLM's running/waiting/KV-cache gauges: ``metrics.py``), ``GET /sim/stats``
(counters), ``POST /sim/down?seconds=N`` (503 on every model route for N seconds), ``POST
/sim/up``, ``POST /sim/throttle?seconds=N&retry_after=S`` (429 with ``retry-after: S`` on every
decision request for N seconds: ``limits.py``), ``POST /sim/reset`` (zero the counters).

As vLLM does: with ``api_key`` every ``/v1`` route answers 401 ``{"error": "Unauthorized"}``
without ``Authorization: Bearer KEY``; a prompt longer than ``max_model_len`` is refused (400,
param ``input_tokens``), and one that leaves less room than ``max_tokens`` is admitted with the
answer rows cut at ``max_model_len`` (the canvas's later rows are then missing).

Images (``images.py``): a chat read's ``image_url`` parts (data URLs, or http(s) URLs fetched
once per read) are opened and hashed; each counts its prompt tokens by the tokenizer's rule
toward ``max_model_len``, and its sha256 goes into the answer's hashes (another picture, another
answer; an answer-key line may name the images). vLLM's refusals: more than ``image_limit``
images, bytes that are not an image, a URL that does not answer. A completions read carries no
images: prompt ids that hold the image token are refused (vLLM would read them as text).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

import httpx
import orjson

from app.engine.invariance import ENV_NAME, SERVER_INFO_PATH
from app.engine.vllm_rules import ReadSpec, VllmBadRequest, error_body, validate_read
from app.sim.capacity import BatchModel
from app.sim.faults import FaultPlan, FaultRates
from app.sim.images import SimImage, image_urls, load_images
from app.sim.key import AnswerKey
from app.sim.limits import DecisionLimits
from app.sim.options import SimOptions
from app.sim.prompts import ReadPrompt, understand
from app.sim.scorer import Row, ScoreOptions, Scorer, SlotQuestion
from app.sim.shapes import chat_response, completions_response, models_response, usage
from app.sim.tokens import (
    PrefixCache,
    SimTokenizer,
    find_slots,
    load_sim_tokenizer,
    text_of,
)

__all__ = ["SimApp", "create_app"]

logger = logging.getLogger("dreads.sim")

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
_JSON = (b"content-type", b"application/json")
_GUARDED = ("/v1", "/v2", "/inference", "/cohere")
_READS = {"/v1/chat/completions": True, "/v1/completions": False}
_COUNTERS = ("requests", "reads", "rejected", "down_503", "abandoned", "unauthorized",
             "truncated", "decisions", "throttled", "refused", "decisions_answered", "images",
             "image_fetches")


class _Reply(Exception):
    """Answer now with this status and JSON body (and extra headers)."""

    def __init__(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = dict(headers or {})


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
        self.answer_key = AnswerKey.load(options.key_path) if options.key_path else None
        score = ScoreOptions(options.noise, options.separation, options.miscalibration,
                             options.seed, options.joint_interference)
        self.scorer = Scorer(score, vocab_size=self.vocab_size, piece=tokenizer.piece,
                             key=self.answer_key)
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
        self.limits = DecisionLimits(rps=options.decision_rps,
                                     max_concurrent=options.decision_max_concurrent)
        #: the ids an image takes in a prompt (a completions prompt may hold none)
        self.image_token_ids = frozenset(tokenizer.text.image_ids(48, 48))
        self._http: httpx.AsyncClient | None = None

    # -- ASGI ---------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        if scope["method"] == "GET" and scope["path"] == "/metrics":
            await self._metrics(send)
            return
        extra: dict[str, str] = {}
        try:
            status, payload = await self._route(scope, body, receive)
        except _Reply as reply:
            status, payload, extra = reply.status, reply.body, reply.headers
        data = b"" if payload is None else orjson.dumps(payload)
        headers = [(b"content-length", str(len(data)).encode())]
        headers += [(k.encode(), v.encode()) for k, v in extra.items()]
        if payload is not None:
            headers.append(_JSON)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def _metrics(self, send: Send) -> None:
        from app.sim.metrics import CONTENT_TYPE, render_metrics

        data = render_metrics(self.options.model, self.batch, reads=self.counters["reads"])
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-length", str(len(data)).encode()),
            (b"content-type", CONTENT_TYPE.encode())]})
        await send({"type": "http.response.body", "body": data})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.batch.aclose()
                if self._http is not None:
                    await self._http.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _route(self, scope: Scope, body: bytes, receive: Receive) -> tuple[int, Any]:
        method, path = scope["method"], scope["path"]
        if path.startswith("/sim/"):
            return self._control(method, path, scope.get("query_string", b""))
        if path.startswith(_GUARDED) and not self._authorized(scope):
            self.counters["unauthorized"] += 1
            raise _Reply(401, {"error": "Unauthorized"})
        if self.faults.is_down:
            self.counters["down_503"] += 1
            raise _Reply(503, error_body("dreads sim is down (POST /sim/up)", None, 503))
        if method == "GET":
            return self._get(path)
        if method == "POST" and path in _READS:
            return await self._read(body, chat=_READS[path], receive=receive)
        if method == "POST" and path in ("/v1/systemone", "/v1/decisions"):
            from app.sim.decisions import answer_decision_route

            return await answer_decision_route(self, path, body, scope, receive)
        raise _Reply(404, error_body(f"unknown route {method} {path}", None, 404))

    def _authorized(self, scope: Scope) -> bool:
        key = self.options.api_key
        if not key:
            return True
        headers = dict(scope.get("headers") or ())
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token, key)

    def _get(self, path: str) -> tuple[int, Any]:
        if path == "/health":
            return 200, None
        if path == "/v1/models":
            opts = self.options
            return 200, models_response(opts.model, self.created, opts.max_model_len)
        if path == "/version":
            return 200, {"version": self.version}
        if path == SERVER_INFO_PATH:
            return 200, {"vllm_env": {ENV_NAME: self.engine_rows is None}}
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
        if method == "POST" and path == "/sim/throttle":
            query_args = parse_qs(query.decode())
            seconds = float(query_args.get("seconds", ["10"])[0])
            retry_after = float(query_args.get("retry_after", ["1"])[0])
            self.limits.storm(seconds, retry_after)
            logger.info("[dreads sim] 429 on every decision request for %.1fs", seconds)
            return 200, {"throttle_for_s": seconds, "retry_after_s": retry_after}
        if method == "POST" and path == "/sim/reset":
            self.counters.clear()
            self.faults.injected.clear()
            return 200, self.stats()
        raise _Reply(404, {"error": {"message": f"unknown route {method} {path}"}})

    def stats(self) -> dict[str, Any]:
        """Counters: requests, reads answered, rejected, faults injected by kind, steps."""
        return {
            **{k: self.counters[k] for k in _COUNTERS},
            "faults": {k: self.faults.injected[k]
                       for k in ("fail", "hang", "malformed", "low_mass")},
            "steps": self.batch.steps,
            "down": self.faults.is_down,
            "decision_peak_in_flight": self.limits.peak_in_flight,
        }

    # -- reads --------------------------------------------------------------------------------
    async def _read(self, raw: bytes, *, chat: bool, receive: Receive) -> tuple[int, Any]:
        self.counters["requests"] += 1
        if self.options.record_bodies:
            self.bodies.append(raw)
        return 200, await self.serve_read(raw, chat=chat, receive=receive)

    async def serve_read(self, raw: bytes, *, chat: bool, receive: Receive | None = None
                         ) -> dict[str, Any]:
        """One read, validated, faulted, batched and answered (raises ``_Reply`` otherwise)."""
        body, spec = self._validated(raw, chat=chat)
        images = await self._images(body) if chat else ()
        pairs, prompt_ids = self._prompt(body, chat=chat, images=images)
        rows = self._fit_context(len(prompt_ids), spec.rows)
        fault = self.faults.draw(raw)
        if fault == "fail":
            raise _Reply(500, error_body("dreads sim: injected internal server error", None, 500))
        if fault == "hang":
            if receive is not None and await _wait_disconnect(receive, self.options.hang_s):
                self.counters["abandoned"] += 1  # the client gave up on the read
            raise _Reply(504, error_body("dreads sim: injected hang ended", None, 504))
        await self.batch.admit()
        self.counters["reads"] += 1
        engine = await self.engine_rows(body, spec, chat=chat) if self.engine_rows else None
        return self._answer(spec, rows, pairs, prompt_ids, chat=chat, fault=fault,
                            engine_rows=engine, images=tuple(i.sha256 for i in images))

    async def _images(self, body: dict[str, Any]) -> tuple[SimImage, ...]:
        """The read's images, fetched and checked (a 400 as vLLM's, otherwise)."""
        try:
            images = await self.load_images(image_urls(body["messages"]))
        except VllmBadRequest as exc:
            self.counters["rejected"] += 1
            raise _Reply(400, error_body(exc.message, exc.param, kind=exc.kind)) from exc
        self.counters["images"] += len(images)
        return images

    async def load_images(self, urls: tuple[str, ...]) -> tuple[SimImage, ...]:
        """``urls`` fetched (http(s)) or decoded, opened and hashed, at most ``image_limit``.

        Raises:
            VllmBadRequest: too many, not an image, or a URL that does not answer.
        """
        if not urls:
            return ()
        if self._http is None:
            self._http = httpx.AsyncClient()
        if len(urls) <= self.options.image_limit:
            self.counters["image_fetches"] += sum(not u.startswith("data:") for u in urls)
        return await load_images(urls, limit=self.options.image_limit, client=self._http)

    def _prompt(self, body: dict[str, Any], *, chat: bool, images: tuple[SimImage, ...] = ()
                ) -> tuple[tuple[tuple[str, str], ...], tuple[int, ...]]:
        """(role, text) pairs and prompt ids of a read, rendered as vLLM renders it."""
        if chat:
            pairs = _message_pairs(body["messages"])
            generation = bool(body.get("add_generation_prompt", True))
            cont = bool(body.get("continue_final_message", False))
            if images:
                messages = tuple({"role": m["role"], "content": m["content"]}
                                 for m in body["messages"])
                return pairs, self.tokenizer.image_prompt_ids(
                    messages, tuple((i.width, i.height) for i in images), generation, cont)
            return pairs, tuple(self.tokenizer.prompt_ids(pairs, generation, cont))
        prompt = body["prompt"]
        prompt_ids = (tuple(prompt) if isinstance(prompt, list)
                      else tuple(self.tokenizer.text.encode(prompt)))
        self._check_no_images(prompt_ids)
        return tuple((m["role"], m["content"])
                     for m in self.tokenizer.messages_from_prompt(prompt_ids)), prompt_ids

    def _check_no_images(self, prompt_ids: tuple[int, ...]) -> None:
        """A completions read carries token ids only, no pixels: image token ids in its prompt
        would be read as text, so the simulator refuses them (dreads sends an image read on
        the chat endpoint)."""
        held = sorted(self.image_token_ids.intersection(prompt_ids))
        if held:
            self.counters["rejected"] += 1
            raise _Reply(400, error_body(
                f"the prompt holds image token ids {held}, but a completions request carries "
                "no images: send the images as image_url parts on /v1/chat/completions",
                "prompt"))

    def _fit_context(self, n_prompt: int, rows: int) -> int:
        """The rows a prompt leaves room for: vLLM refuses a prompt past max_model_len and cuts
        ``max_tokens`` (so the canvas's rows) to what fits."""
        limit = self.options.max_model_len
        if n_prompt > limit:
            self.counters["rejected"] += 1
            raise _Reply(400, error_body(
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {n_prompt} input tokens, which exceeds this limit even without any "
                "output tokens. Please reduce the length of the input prompt. (parameter="
                f"input_tokens, value={n_prompt})", "input_tokens"))
        if n_prompt + rows > limit:
            self.counters["truncated"] += 1
        fit = min(rows, limit - n_prompt)
        if fit < 1:
            self.counters["rejected"] += 1
            raise _Reply(400, error_body(
                f"max_tokens must be at least 1, got {fit}. (parameter=max_tokens, value={fit})",
                "max_tokens"))
        return fit

    def _validated(self, raw: bytes, *, chat: bool) -> tuple[dict[str, Any], ReadSpec]:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self.counters["rejected"] += 1
            raise _Reply(400, error_body(f"the body is not valid JSON: {exc}", None)) from exc
        try:
            self.check_model(body.get("model") if isinstance(body, dict) else None)
            spec = validate_read(body, chat=chat, canvas_length=self.options.canvas_length,
                                 vocab_size=self.vocab_size,
                                 default_temperature=self.options.default_temperature)
        except VllmBadRequest as exc:
            self.counters["rejected"] += 1
            raise _Reply(400, error_body(exc.message, exc.param, kind=exc.kind)) from exc
        except _Reply:
            self.counters["rejected"] += 1
            raise
        return body, spec

    def check_model(self, model: Any) -> None:
        """vLLM's 404 for a model it does not serve."""
        if model != self.options.model:
            raise _Reply(404, error_body(
                f"The model `{model}` does not exist. Valid aliases: {self.options.model}.",
                "model", 404))

    def _answer(self, spec: ReadSpec, n_rows: int, pairs: tuple[tuple[str, str], ...],
                prompt_ids: tuple[int, ...], *, chat: bool, fault: str | None,
                engine_rows: list[Row] | None = None,
                images: tuple[str, ...] = ()) -> dict[str, Any]:
        canvas = spec.canvas or self._blank_canvas(spec.width)
        if engine_rows is not None:
            rows = engine_rows[:n_rows]
        else:
            slots = self._slots(understand(pairs), canvas, spec, images)
            rows = self.scorer.rows(canvas, n_rows, spec.logprob_ids, slots, fault)
        cached = self.prefix.lookup_and_insert(prompt_ids)
        info = usage(len(prompt_ids), len(rows), cached)
        text = "".join(self.tokenizer.piece(r.argmax_id) for r in rows)
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-sim{self.counters['reads']}"
        if chat:
            return chat_response(request_id, self.options.model, self.created, rows, text, info,
                                 self.tokenizer.piece)
        return completions_response(request_id, self.options.model, self.created, rows, text,
                                    info)

    def _blank_canvas(self, width: int) -> tuple[int, ...]:
        """A generation without a seed canvas: the model closes its turn at once."""
        info = self.tokenizer.text.info
        return (info.turn_close_id, *([info.pad_id] * (width - 1)))

    def _slots(self, prompt: ReadPrompt, canvas: tuple[int, ...], spec: ReadSpec,
               images: tuple[str, ...] = ()) -> dict[int, SlotQuestion]:
        known = set(prompt.questions) or None
        names = find_slots(self.tokenizer, canvas, spec.rows, spec.pinned, known,
                           reply_slot=prompt.reply_slot)
        return {p: _slot_question(prompt, name, images) for p, name in names.items()}


def _slot_question(prompt: ReadPrompt, name: str, images: tuple[str, ...]) -> SlotQuestion:
    """The question at a slot; a prompt dreads did not build reads as its whole text."""
    asked = prompt.questions.get(name)
    if asked is None:
        return SlotQuestion(prompt.state_text, name, images=images)
    return SlotQuestion(prompt.state_text, asked.instructions,
                        asked.key_label if asked.kind is not None else None, asked.labels,
                        images)


def _message_pairs(messages: Any) -> tuple[tuple[str, str], ...]:
    """(role, text) of each message; a message of content parts reads as its text parts."""
    try:
        return tuple((str(m["role"]), text_of(m["content"])) for m in messages)
    except (TypeError, KeyError) as exc:
        raise _Reply(400, error_body("every message needs role and content (text)",
                                     "messages")) from exc


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
    from app.sim.engine_rows import EngineRows

    return EngineRows(options.engine_model, device=options.engine_device,
                      dtype=options.engine_dtype, canvas_length=options.canvas_length)


def create_app(options: SimOptions) -> SimApp:
    """The simulator app for ``options`` (loads the tokenizer and the answer key)."""
    return SimApp(options, load_sim_tokenizer(options.tokenizer))
