"""Who answers a decision: a decision in, its answers out (``AnswerSource``).

An answer source takes a decision and returns its answers with whatever diagnostics it has;
the runner, the store, reports and the API do not care which one answered. What each source
is (its name, its route, its request and reply) is its ``SourceSpec`` in
``app.engine.sources``; this module does the sending. How a read reaches a model is the other
seam, ``app.upstream.base.Upstream``, which only ``ReadsSource`` uses.

- ``ReadsSource`` (the spec that plans reads: ``answer_by`` ``reads``, the default): dreads'
  own reads. The decision's
  images are fetched once (through the process's ``ImageCache``, checked against the sha256
  stored at submit), the decision is planned into canvases with the run's tokenizer and read
  through an ``Upstream`` (vLLM, dreads sim, the in-process engine) draw by draw until the
  draw policy stops (``drive``): full diagnostics. Every draw reuses the fetched images.
- ``EndpointSource`` (every other spec: ``systemone``, ``decisions``, a plugin's): one request
  per decision, all its questions, built by the spec's ``ask`` and posted to its ``path``
  (``app.upstream.endpoint``), the reply read by its ``read``: one draw per question, the
  diagnostics the endpoint returns, refusals per question.

``EndpointPool`` keeps one ``DecisionEndpoint`` per run in a process, so every chunk of a run
shares its connections and its budget (requests per second, requests in flight).

``drive`` is the read loop every path shares; ``answer_decision`` runs one decision straight
through an upstream, with no database and no queue (``dreads decide``, the API's
``POST /v1/systemone``). The chunk runner (``app.runs.chunk``) puts leases and storage around
a source.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from app.connect.plugins import find_source
from app.engine import (
    Answer,
    Decision,
    DecisionFlow,
    DrawRecord,
    ReadRequest,
    ReadResult,
    ReadSettings,
    Refusal,
    SourceSpec,
    TextTokenizer,
    plan_decision,
)
from app.engine.pricing import usage_tokens
from app.engine.types import ImageData
from app.images import ImageCache, ImagePolicy, StoredImage
from app.runs.endpoint_images import endpoint_image_urls
from app.upstream.base import Upstream
from app.upstream.endpoint import DecisionEndpoint
from app.upstream.urls import key_for

__all__ = ["AnswerSource", "Answered", "EndpointOptions", "EndpointPool", "EndpointSource",
           "ReadsSource",
           "answer_decision", "drive"]


@dataclass(frozen=True)
class Answered:
    """A decision's answers from any source."""

    answers: tuple[Answer, ...]
    draws: tuple[DrawRecord, ...]
    n_reads: int  #: requests it took (reads, or the endpoint's one request)
    refusals: tuple[Refusal, ...] = ()
    usage: Mapping[str, Any] | None = None  #: a decision endpoint's usage object
    #: tokens its requests spent: the reads' prompt tokens and canvas rows asked for
    #: (``max_tokens``), or the endpoint's usage
    input_tokens: int = 0
    output_tokens: int = 0


class AnswerSource(Protocol):
    #: requests sent so far, failed ones included (a chunk's total)
    n_requests: int

    async def answer(self, decision: Decision, *, replicate: int,
                     images: Sequence[StoredImage] = ()) -> Answered:
        """Answer every question of ``decision``; ``images`` are its images as stored at
        submit (with their sha256), () to take its references as they are.

        Raises:
            ImageChanged: an image's bytes are not the ones checked at submit (permanent).
            ImageError: an image could not be fetched (``ImageUnreachable``) or used.
            InputError / ConfigError: the decision cannot be asked this way (permanent).
            UpstreamError: the model server or endpoint failed (after its own retries).
        """
        ...


Read = Callable[[ReadRequest], Awaitable[ReadResult]]


async def drive(flow: DecisionFlow, read: Read) -> None:
    """Send each round of reads at once and record them until every question's draw policy
    stops. A failed read is raised once the other reads of its round have ended, so none is
    left running behind the failure.

    Raises:
        UpstreamError: a read failed (after the upstream's own retries) or came back malformed.
    """
    while not flow.done:
        requests = flow.next_requests()
        results = await asyncio.gather(*(read(r) for r in requests), return_exceptions=True)
        for outcome in results:
            if isinstance(outcome, BaseException):
                raise outcome
        for request, outcome in zip(requests, results, strict=True):
            flow.record(request, outcome)  # type: ignore[arg-type]


class ReadsSource:
    """dreads' own reads over ``read`` (an ``Upstream.read``, bounded by the caller); a
    decision's images come through ``images`` (this process's cache; by default one that
    reads no local file)."""

    def __init__(self, read: Read, tokenizer: TextTokenizer, settings: ReadSettings, *,
                 max_model_len: int | None, images: ImageCache | None = None,
                 plan_pool: Executor | None = None) -> None:
        self._read = read
        self.plan_pool = plan_pool  #: where decisions are planned (None: on the loop)
        self.tokenizer = tokenizer
        self.settings = settings
        self.max_model_len = max_model_len
        self.images = images
        self.n_requests = 0

    async def answer(self, decision: Decision, *, replicate: int,
                     images: Sequence[StoredImage] = ()) -> Answered:
        fetched = await self.fetch_images(decision, images)
        return await self.answer_fetched(decision, fetched, replicate=replicate)

    async def fetch_images(self, decision: Decision, images: Sequence[StoredImage] = ()
                           ) -> tuple[ImageData, ...]:
        """The decision's images, each fetched once (or taken from the cache) and checked."""
        if not decision.images:
            return ()
        if self.images is None:
            self.images = ImageCache(ImagePolicy())
        stored = tuple(images) or tuple(StoredImage(ref) for ref in decision.images)
        return await self.images.load_all(stored)

    async def answer_fetched(self, decision: Decision, images: Sequence[ImageData], *,
                             replicate: int) -> Answered:
        """Plan and read ``decision`` with its images already fetched: every draw uses them."""
        plan_one = functools.partial(plan_decision, decision, self.settings, self.tokenizer,
                                     images=images, max_model_len=self.max_model_len)
        plan = (plan_one() if self.plan_pool is None else
                await asyncio.get_running_loop().run_in_executor(self.plan_pool, plan_one))
        flow = DecisionFlow(plan, self.settings, vocab_size=self.tokenizer.info.vocab_size,
                            replicate=replicate)
        tokens = _TokenCount()
        try:
            await drive(flow, tokens.counting(self._read))
        finally:
            self.n_requests += flow.n_reads
        return Answered(flow.answers(), flow.draws(), flow.n_reads,
                        input_tokens=tokens.input, output_tokens=tokens.output)


@dataclass
class _TokenCount:
    """The tokens of a decision's reads: each answered read's prompt tokens (as the server
    counted them) and the canvas rows it asked for (``max_tokens``)."""

    input: int = 0
    output: int = 0

    def counting(self, read: Read) -> Read:
        async def counted(request: ReadRequest) -> ReadResult:
            result = await read(request)
            self.input += result.prompt_tokens or 0
            rows = request.body.get("max_tokens")
            self.output += rows if isinstance(rows, int) and not isinstance(rows, bool) else 0
            return result

        return counted


async def answer_decision(decision: Decision, settings: ReadSettings, tokenizer: TextTokenizer,
                          upstream: Upstream, *, images: Sequence[ImageData] = (),
                          image_policy: ImagePolicy | None = None,
                          plan_pool: Executor | None = None) -> Answered:
    """One decision straight through ``upstream``: planned (a prompt longer than the
    upstream's ``max_model_len``, once it knows it, is refused), read draw by draw until every
    question's draw policy stops, and folded. ``images``: the decision's images, fetched and
    checked by the caller (``app.images.fetch_image_async``), in the order of its references;
    when none are given, a decision's images are fetched here once, under ``image_policy``
    (by default: no local file). ``plan_pool``: the executor that tokenizes (None: the loop).

    Raises:
        ImageError: an image cannot be fetched or used (the message names it).
        TemplateError: the question cannot be read (a label not one token, too wide, too long).
        UpstreamError: the upstream failed after its retries, or answered malformed rows.
    """
    source = ReadsSource(upstream.read, tokenizer, settings, max_model_len=upstream.max_model_len,
                         images=ImageCache(image_policy or ImagePolicy()), plan_pool=plan_pool)
    if decision.images and not images:
        images = await source.fetch_images(decision)
    return await source.answer_fetched(decision, images, replicate=0)


class EndpointSource:
    """One request per decision to a decision endpoint, in its source's shape."""

    def __init__(self, spec: SourceSpec, endpoint: DecisionEndpoint, model: str,
                 images: ImagePolicy | None = None) -> None:
        if spec.ask is None or spec.read is None:
            raise ValueError(f"answer source {spec.name!r} reads: it has no endpoint")
        self.spec = spec
        self._ask, self._read = spec.ask, spec.read
        self.endpoint = endpoint
        self.model = model
        self.images = images or ImagePolicy()  #: what a ``file://`` image may be read from
        self.n_requests = 0

    async def answer(self, decision: Decision, *, replicate: int,
                     images: Sequence[StoredImage] = ()) -> Answered:
        """The endpoint fetches the decision's http(s) images itself, from their references;
        a ``file://`` image is read here and sent as a data URL (``endpoint_image_urls``)."""
        urls = await endpoint_image_urls(decision.images, self.images)
        # not encode_body: its sorted keys would reorder a choice's criteria (its options)
        body = orjson.dumps(self._ask(decision, self.model, image_urls=urls))
        self.n_requests += 1
        payload, latency_ms = await self.endpoint.ask(body)
        read = self._read(decision, payload, latency_ms=latency_ms)
        tokens_in, tokens_out = usage_tokens(read.usage)
        return Answered(read.answers, read.draws, 1, read.refusals, read.usage,
                        input_tokens=tokens_in, output_tokens=tokens_out)


@dataclass(frozen=True)
class EndpointOptions:
    """How this process asks decision endpoints (``DREADS_ANSWER_*``). The API key comes from
    the process's settings, never from the run."""

    timeout_s: float = 120.0  #: one request
    give_up_s: float = 300.0  #: transient failures retried this long before the attempt fails
    api_key: str | None = field(default=None, repr=False)
    #: the server ``api_key`` belongs to (``DREADS_ANSWER_URL``, else the upstream): the key
    #: goes to a run's endpoint only when it is on that server
    key_url: str | None = None
    #: where a decision's ``file://`` images may be read from, to send their bytes
    images: ImagePolicy = field(default_factory=ImagePolicy)


@dataclass
class EndpointPool:
    """The decision endpoints of the runs this process answers, one per run (its budget is
    the run's)."""

    options: EndpointOptions = field(default_factory=EndpointOptions)
    #: a run's answer_url -> where it is served here ("sim" -> the simulator this process runs)
    urls: Mapping[str, str] = field(default_factory=dict)
    #: processes sharing each run's budget (an answers worker's pool): each takes 1/share
    share: int = 1

    def __post_init__(self) -> None:
        self.share = max(1, self.share)
        self._endpoints: dict[tuple[int, str, str], DecisionEndpoint] = {}

    def budget(self, settings: ReadSettings) -> tuple[float, int]:
        """(requests per second, requests in flight) of this process: the run's share."""
        return (settings.answer_rps / self.share,
                max(1, -(-settings.answer_concurrency // self.share)))

    def endpoint(self, run_id: int, settings: ReadSettings) -> DecisionEndpoint:
        """The run's endpoint in this process, made on first use (or when the run's budget
        changed).

        Raises:
            ConfigError: the run's source is unknown here (no plugin adds it) or reads.
        """
        key = (run_id, str(settings.answer_by), settings.answer_url)
        found = self._endpoints.get(key)
        rps, concurrency = self.budget(settings)
        if found is None or (found.rps, found.concurrency) != (rps, concurrency):
            url = self.urls.get(settings.answer_url, settings.answer_url)
            options = self.options
            path = find_source(settings.answer_by).path
            api_key = key_for(settings.answer_url, key=options.api_key,
                              key_url=options.key_url)
            found = DecisionEndpoint(url, path, api_key=api_key, rps=rps,
                                     concurrency=concurrency, timeout_s=options.timeout_s,
                                     give_up_s=options.give_up_s)
            self._endpoints[key] = found
        return found

    def source(self, run_id: int, settings: ReadSettings) -> EndpointSource:
        return EndpointSource(find_source(settings.answer_by), self.endpoint(run_id, settings),
                              settings.model, self.options.images)

    async def aclose(self) -> None:
        endpoints, self._endpoints = list(self._endpoints.values()), {}
        for endpoint in endpoints:
            await endpoint.aclose()
