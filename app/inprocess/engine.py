"""``TransformersUpstream``: the ``Upstream`` Protocol answered in-process by DiffusionGemma.

It takes the same ``ReadRequest`` the HTTP client sends (the body is validated exactly as the
simulator validates it for vLLM) and returns the same ``ReadResult``: at each slot the full
vocabulary log-softmax (temperature 1, softcap 30) of the requested ids plus the argmax, or the
distribution renormalised over the requested ids when the read is constrained. Reads from every
decision in flight in the process are micro-batched onto one worker thread (one engine per GPU).
A chat read's ``image_url`` parts (data URLs) are read with the model's image encoder
(``images.py``, ``vision.py``), loaded at the first read with images.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import torch
import transformers

from app.engine.types import (
    Endpoint,
    ReadRequest,
    ReadResult,
    ServerFingerprint,
)
from app.engine.vllm_rules import VllmBadRequest, validate_read
from app.errors import ConfigError, UpstreamRejected, UpstreamUnavailable
from app.inprocess.batcher import MicroBatcher
from app.inprocess.executor import BatchExecutor, JobOutput, ReadJob
from app.inprocess.images import (
    ImageInputs,
    ImagePreparer,
    image_urls,
    load_image_processor,
)
from app.inprocess.memory import free_bytes
from app.inprocess.model import ReadModel, load_model
from app.inprocess.prefill_cache import PrefillCache
from app.tokenizer.hf import HFTextTokenizer
from app.upstream.base import WaitProgress

__all__ = ["ENGINE", "TransformersUpstream", "default_cache_bytes"]

log = logging.getLogger("dreads.upstream.transformers")

ENGINE = "transformers"
_PROMPT_MEMO = 4096
DEFAULT_MAX_BATCH = 64
DEFAULT_PREFILL_BUDGET = 16384


def prefill_budget(max_batch: int) -> int:
    """The prefill token budget that goes with ``max_batch`` reads a forward: 16,384 tokens at
    the default 64, and 512 a read below it (a field prompt is about 460 tokens), so a batch
    lowered to fit a small card lowers its prefill's activations with it."""
    return min(DEFAULT_PREFILL_BUDGET, max(512, 512 * max_batch))


def default_cache_bytes(device: str) -> int:
    """The prompt KV cache's budget: on a GPU, 30% of the memory free once the weights are
    loaded, under the engine's memory limit if one is set (``memory.free_bytes``; at least 256
    MiB; the rest is left to forward activations and decoder buffers); 512 MiB on the CPU. A
    prompt of 460 tokens holds about 100 MiB of KV at full size in bf16, so an H200 (about 90
    GiB free after the weights) keeps some 270 prompts."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return max(256 << 20, int(free_bytes(torch.device(device)) * 0.3))
    return 512 << 20


class TransformersUpstream:
    """Reads answered by a local DiffusionGemma (``pip install -e .[engine]``).

    Example::

        upstream = TransformersUpstream("google/diffusiongemma-26B-A4B-it",
                                        tokenizer=load_tokenizer("google/diffusiongemma-26B-A4B-it"),
                                        device="cuda")
        result = await upstream.read(request)
    """

    engine: str = ENGINE

    def __init__(self, model_path: str, *, tokenizer: HFTextTokenizer, device: str = "cpu",
                 dtype: str = "bfloat16", max_batch: int = DEFAULT_MAX_BATCH,
                 flush_ms: float = 3.0, prefill_token_budget: int = DEFAULT_PREFILL_BUDGET,
                 decode_token_budget: int = 65536, cache_bytes: int | None = None,
                 canvas_length: int | None = None, model: ReadModel | None = None) -> None:
        self.model_id = model_path
        self.model = model if model is not None else load_model(model_path, device=device,
                                                                 dtype=dtype)
        self.tokenizer = tokenizer
        self.canvas_length = int(canvas_length or self.model.config.canvas_length or 256)
        self.cache = PrefillCache(cache_bytes if cache_bytes is not None  # the model's device:
                                  else default_cache_bytes(str(self.model.device)))  # from_model
        self.executor = BatchExecutor(self.model, self.cache,
                                      prefill_token_budget=prefill_token_budget,
                                      decode_batch=max_batch,
                                      decode_token_budget=decode_token_budget)
        self.batcher: MicroBatcher[ReadJob, JobOutput] = MicroBatcher(
            self._run_batch, max_batch=max_batch, flush_ms=flush_ms,
            first=lambda job: job.key in self.cache)  # a decision's later draws first
        self._prompts: OrderedDict[bytes, tuple[int, ...]] = OrderedDict()
        self._images: ImagePreparer | None = None  #: made at the first read with images

    @classmethod
    def from_model(cls, model: ReadModel, *, tokenizer: HFTextTokenizer, name: str,
                   **options: Any) -> TransformersUpstream:
        """An upstream over an already loaded model (tests, benchmarks)."""
        return cls(name, tokenizer=tokenizer, model=model, **options)

    # -- the Upstream Protocol ------------------------------------------------------------------

    async def read(self, request: ReadRequest) -> ReadResult:
        """Answer one read; raises UpstreamRejected (what vLLM answers 400) or
        UpstreamUnavailable (the forward failed, e.g. out of memory)."""
        started = time.perf_counter()
        job = self.job_for(request)
        output = await self.batcher.submit(job)
        return ReadResult(rows=output.rows, prompt_tokens=output.prompt_tokens,
                          cached_tokens=output.cached_tokens,
                          latency_ms=(time.perf_counter() - started) * 1000.0)

    @property
    def max_model_len(self) -> int | None:
        """The model's context length (its config's ``max_position_embeddings``)."""
        return int(getattr(self.model.text_config, "max_position_embeddings", 0)) or None

    async def fingerprint(self) -> ServerFingerprint:
        return ServerFingerprint(
            engine=ENGINE,
            model_id=self.model_id,
            max_model_len=self.max_model_len,
            version=(f"transformers {transformers.__version__}; torch {torch.__version__}; "
                     f"weights {self.model.weights}"),
            canvas_length=self.canvas_length,
        )

    async def wait_ready(self, *, timeout_s: float, probe: ReadRequest | None = None,
                         progress: WaitProgress | None = None) -> None:
        """The model is loaded in the constructor; a probe read must succeed within timeout_s
        (there is nothing to wait for, so ``progress`` is never called)."""
        if probe is None:
            return
        try:
            await asyncio.wait_for(self.read(probe), timeout_s)
        except TimeoutError as exc:
            raise UpstreamUnavailable(
                f"the transformers engine did not answer a probe read within {timeout_s:g}s",
                kind="timeout") from exc

    async def aclose(self) -> None:
        await self.batcher.aclose()
        self.cache.clear()

    # -- requests -> jobs -----------------------------------------------------------------------

    def job_for(self, request: ReadRequest) -> ReadJob:
        """Validate a request as vLLM would and turn it into a ReadJob."""
        body = request.body
        chat = request.endpoint == Endpoint.CHAT
        try:
            spec = validate_read(body, chat=chat, canvas_length=self.canvas_length,
                                 vocab_size=self.model.vocab_size)
        except VllmBadRequest as exc:
            raise UpstreamRejected(exc.message, status=400, param=exc.param) from exc
        xargs = body.get("vllm_xargs") or {}
        if int(xargs.get("diffusion_max_steps", 1)) != 1:
            raise UpstreamRejected(
                "the transformers engine runs exactly one read-only step: use steps = 1 "
                "(or serve the model with vLLM for multi-step reads)", param="extra_args")
        bad = [s for s in request.slots if not 0 <= s < spec.width]
        if bad:
            raise UpstreamRejected(f"slot positions {bad} lie outside the canvas of width "
                                   f"{spec.width}", param="extra_args")
        if spec.canvas is None or not spec.read_only:
            raise UpstreamRejected(
                "the transformers engine serves read-only reads of a seed canvas: send "
                "diffusion_read_only: true and diffusion_seed_canvas", param="extra_args")
        ids = spec.logprob_ids or tuple(request.logprob_ids)
        images = self._image_inputs(image_urls(body["messages"]) if chat else ())
        prompt = self._prompt_ids(body, chat=chat, images=images, planned=request.prompt_ids)
        return ReadJob(prompt, spec.canvas, tuple(request.slots), tuple(ids), spec.constrained,
                       images)

    def _image_inputs(self, urls: tuple[str, ...]) -> ImageInputs | None:
        """The read's images decoded and processed (once per set of images: the draws of a
        decision share them), None without any; the image encoder is loaded at the first
        read with images.

        Raises:
            UpstreamRejected: an image that is no data URL or no image, or too elongated for
                the vision tower; a model whose checkpoint has no image encoder.
        """
        if not urls:
            return None
        try:
            self.model.vision.ensure_loaded()
        except ConfigError as exc:
            raise UpstreamRejected(f"the transformers engine cannot read images with "
                                   f"{self.model_id!r}: {exc}", param="messages") from exc
        if self._images is None:
            try:
                processor = load_image_processor(self.model.vision.source,
                                                 self.model.config.vision_config)
            except (OSError, ValueError) as exc:
                raise UpstreamRejected(f"the transformers engine cannot read images with "
                                       f"{self.model_id!r}: its image processor does not load "
                                       f"({exc})", param="messages") from exc
            self._images = ImagePreparer(processor)
        inputs = self._images.prepare(urls)
        self._check_patch_grid(inputs)
        return inputs

    def _check_patch_grid(self, inputs: ImageInputs) -> None:
        """Each image's patches must fit the vision tower's table of patch positions."""
        side = int(getattr(self.model.config.vision_config, "position_embedding_size", 0) or 0)
        for k, positions in enumerate(inputs.position_ids):
            if side and int(positions.max()) >= side:
                width, height = inputs.sizes[k]
                raise UpstreamRejected(
                    f"image {k + 1} ({width}x{height} pixels) is too elongated for this model's "
                    f"vision tower ({side} patches a side at most): crop or pad it nearer to "
                    "square", param="messages")

    def _prompt_ids(self, body: Mapping[str, Any], *, chat: bool,
                    images: ImageInputs | None = None,
                    planned: tuple[int, ...] = ()) -> tuple[int, ...]:
        """The prompt as vLLM renders it (a chat body may continue a final assistant
        message: the thought block of a read), each image expanded to its placeholder ids:
        the ``planned`` ids when the planner sent them (the same ids, rendered once per
        decision instead of twice), else the body rendered here.

        Raises:
            UpstreamRejected: the prompt's image token ids do not match its images.
        """
        if planned and chat:
            if images is not None:
                self._check_image_runs(planned, images)
            return planned
        if not chat:
            return self._completion_ids(body["prompt"])
        flags = (bool(body.get("add_generation_prompt", True)),
                 bool(body.get("continue_final_message", False)))
        key = hashlib.sha256(orjson.dumps([body["messages"], flags],  # images: megabytes
                                          option=orjson.OPT_SORT_KEYS)).digest()
        ids = self._prompts.get(key)
        if ids is None:
            sizes = {"image_sizes": images.sizes} if images is not None else {}
            ids = tuple(self.tokenizer.render_chat(
                body["messages"], add_generation_prompt=flags[0],
                continue_final_message=flags[1], **sizes))
            if images is not None:
                self._check_image_runs(ids, images)
            self._prompts[key] = ids
            if len(self._prompts) > _PROMPT_MEMO:
                self._prompts.popitem(last=False)
        return ids

    def _check_image_runs(self, prompt: tuple[int, ...], images: ImageInputs) -> None:
        """Each image's run of image token ids must be as long as its features."""
        runs = _image_runs(prompt, self.model.image_token_id)
        if runs != images.soft_tokens:
            raise UpstreamRejected(
                f"the prompt holds runs of {list(runs)} image tokens (id "
                f"{self.model.image_token_id}) for {len(images.soft_tokens)} image(s) of "
                f"{list(images.soft_tokens)} features (Gemma 4's image processor): render the "
                "prompt with the served model's own tokenizer, whose image rule is the "
                "model's", param="messages")

    def _completion_ids(self, prompt: Any) -> tuple[int, ...]:
        if isinstance(prompt, str):
            return tuple(self.tokenizer.encode(prompt))
        bad = [i for i in prompt if not 0 <= i < self.model.vocab_size]
        if bad:
            raise UpstreamRejected(f"prompt token ids {bad[:5]} out of vocabulary "
                                   f"[0, {self.model.vocab_size})", param="prompt")
        return tuple(int(i) for i in prompt)

    def _run_batch(self, jobs: Sequence[ReadJob]) -> list[JobOutput]:
        try:
            return self.executor.run(jobs)
        except torch.OutOfMemoryError as exc:
            self.cache.clear()
            raise UpstreamUnavailable(
                f"the transformers engine ran out of device memory on a batch of {len(jobs)} "
                "reads: lower DREADS_ENGINE_MAX_BATCH (reads in one forward)", kind="server_error",
            ) from exc
        except RuntimeError as exc:
            log.exception("transformers engine batch of %d reads failed", len(jobs))
            raise UpstreamUnavailable(f"the transformers engine failed: {exc}",
                                      kind="server_error") from exc


def _image_runs(prompt: tuple[int, ...], image_token_id: int) -> tuple[int, ...]:
    """The lengths of the runs of ``image_token_id`` in ``prompt``, in order (one an image)."""
    runs: list[int] = []
    previous = None
    for token in prompt:
        if token == image_token_id:
            if previous == image_token_id:
                runs[-1] += 1
            else:
                runs.append(1)
        previous = token
    return tuple(runs)
