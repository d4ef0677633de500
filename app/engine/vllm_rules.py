"""What vLLM 0.33 accepts in a diffusion read (protocol.md 4, 7): its request rules, in one place.

The simulator (``app.sim``) and the in-process engine
(``app.inprocess``) both check a read body here, so both refuse exactly what
vLLM refuses.
Every rule raises ``VllmBadRequest``; the simulator answers it with vLLM's 400 body
``{"error": {"message", "type", "param", "code": 400}}``. The messages are vLLM's: a
validation error with a parameter ends in `` (parameter=NAME[, value=V])``, as
``VLLMValidationError`` prints itself; the forbidden sampling fields share one message with
``param: null``; a request-shape rule (``logprob_token_ids`` without ``logprobs``) is a FastAPI
validation error (type ``Bad Request``). Like vLLM, a read need not be read-only and need not
carry a seed canvas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_LOGPROB_TOKEN_IDS", "ReadSpec", "VllmBadRequest", "error_body", "validate_read"]

#: vllm/sampling_params.py's per-request cap on ``logprob_token_ids``.
MAX_LOGPROB_TOKEN_IDS = 128

_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError"}
_SAMPLING = ("The temperature, min_p, seed, min_tokens, logit_bias, bad_words, and "
             "allowed_token_ids sampling parameters are not yet supported with diffusion models.")
_STRUCTURED = ("Structured outputs are not yet supported for diffusion language models. Remove "
               "the structured output constraint (e.g. `response_format`, `structured_outputs`) "
               "from the request.")
_XARGS = "extra_args"


class VllmBadRequest(Exception):
    """A request vLLM would answer with 400."""

    def __init__(self, message: str, *, param: str | None = None, value: Any = None,
                 kind: str = "BadRequestError") -> None:
        extras = [f"{k}={v}" for k, v in (("parameter", param), ("value", value))
                  if v is not None and kind == "BadRequestError"]
        full = f"{message} ({', '.join(extras)})" if extras else message
        super().__init__(full)
        self.message = full
        self.param = param
        self.kind = kind


@dataclass(frozen=True)
class ReadSpec:
    """A validated read: what the scorer needs."""

    canvas: tuple[int, ...] | None  #: the seed canvas (None: a plain generation)
    width: int
    rows: int  #: logprob rows answered: min(max_tokens, width)
    max_tokens: int
    logprob_ids: tuple[int, ...]
    pinned: tuple[int, ...] | None
    constrained: bool
    read_only: bool


def error_body(message: str, param: str | None, code: int = 400,
               kind: str | None = None) -> dict[str, Any]:
    """vLLM's error response body."""
    name = kind or _ERROR_TYPES.get(code, "InternalServerError")
    return {"error": {"message": message, "type": name, "param": param, "code": code}}


def validate_read(body: Any, *, chat: bool, canvas_length: int, vocab_size: int,
                  default_temperature: float = 1.0) -> ReadSpec:
    """Check a chat or completions body as vLLM does and return the read it asks for.
    ``default_temperature`` is the checkpoint's generation-config temperature, used when the
    body sends none."""
    if not isinstance(body, Mapping):
        raise VllmBadRequest("the request body must be a JSON object")
    _check_request_shape(body, chat=chat)
    _check_sampling(body, default_temperature)
    logprob_ids = _check_logprobs(body, vocab_size=vocab_size)
    xargs = body.get("vllm_xargs") or {}
    if not isinstance(xargs, Mapping):
        raise VllmBadRequest("vllm_xargs must be an object", param="vllm_xargs")
    width = _check_width(xargs, canvas_length)
    canvas = _check_seed_canvas(xargs, width, vocab_size)
    pinned = _check_pinned(xargs, canvas, width)
    _positive_int(xargs.get("diffusion_max_steps", 1), "diffusion_max_steps")
    read_only = _flag(xargs.get("diffusion_read_only", False), "diffusion_read_only")
    constrained = _flag(xargs.get("diffusion_constrained", False), "diffusion_constrained")
    if constrained and not logprob_ids:
        raise VllmBadRequest("diffusion_constrained needs logprob_token_ids: they are the "
                            "allowed set.", param=_XARGS)
    max_tokens = _max_tokens(body, width)
    return ReadSpec(canvas, width, min(max_tokens, width), max_tokens, logprob_ids, pinned,
                    constrained, read_only)


def _check_request_shape(body: Mapping[str, Any], *, chat: bool) -> None:
    """The rules vLLM's request models check before anything else (FastAPI 400s)."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise VllmBadRequest("1 validation error:\n  Field required: messages",
                                param="messages", kind="Bad Request")
        if body.get("continue_final_message") and body.get("add_generation_prompt", True):
            raise VllmBadRequest(
                "1 validation error:\n  Value error, Cannot set both `continue_final_message` "
                "and `add_generation_prompt` to True.", param="body", kind="Bad Request")
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, (list, str)) or not prompt:
            raise VllmBadRequest("1 validation error:\n  Field required: prompt",
                                param="prompt", kind="Bad Request")
    ids = body.get("logprob_token_ids")
    missing = not body.get("logprobs") if chat else body.get("logprobs") is None
    if ids and missing:
        what = "must be set to true" if chat else "must be set"
        raise VllmBadRequest(
            f"1 validation error:\n  Value error, when using `logprob_token_ids`, `logprobs` "
            f"{what}. (parameter=logprob_token_ids)", param="logprob_token_ids",
            kind="Bad Request")


def _check_sampling(body: Mapping[str, Any], default_temperature: float) -> None:
    temperature = body.get("temperature")
    if temperature is None:
        temperature = default_temperature
    bad = (float(temperature) != 1.0 or float(body.get("min_p") or 0.0) > 0.0
           or body.get("seed") is not None or int(body.get("min_tokens") or 0) > 0
           or any(body.get(name) for name in ("logit_bias", "bad_words", "allowed_token_ids")))
    if bad:
        raise VllmBadRequest(_SAMPLING)
    if any(body.get(name) for name in ("response_format", "structured_outputs")):
        raise VllmBadRequest(_STRUCTURED)


def _check_logprobs(body: Mapping[str, Any], *, vocab_size: int) -> tuple[int, ...]:
    ids = body.get("logprob_token_ids") or []
    if not isinstance(ids, list) or not all(_is_int(i) for i in ids):
        raise VllmBadRequest("1 validation error:\n  Input should be a valid list of integers",
                            param="logprob_token_ids", kind="Bad Request")
    if len(ids) > MAX_LOGPROB_TOKEN_IDS:
        raise VllmBadRequest(
            f"Requested logprob_token_ids of length {len(ids)}, which is greater than max "
            f"allowed: {MAX_LOGPROB_TOKEN_IDS}", param="logprob_token_ids", value=len(ids))
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise VllmBadRequest(
            f"token_id(s) {bad} in logprob_token_ids contain out-of-vocab token ids. "
            f"Vocabulary size: {vocab_size}", param="logprob_token_ids", value=bad)
    return tuple(ids)


def _check_width(xargs: Mapping[str, Any], canvas_length: int) -> int:
    width = xargs.get("diffusion_canvas_length")
    if width is None:
        return canvas_length
    if not _is_int(width) or not 0 < width <= canvas_length:
        raise VllmBadRequest("diffusion_canvas_length must be a positive integer no larger than "
                            "the served canvas.", param=_XARGS)
    return int(width)


def _check_seed_canvas(xargs: Mapping[str, Any], width: int,
                       vocab_size: int) -> tuple[int, ...] | None:
    canvas = xargs.get("diffusion_seed_canvas")
    if canvas is None:
        return None
    if not isinstance(canvas, list) or not all(_is_int(t) for t in canvas):
        raise VllmBadRequest("diffusion_seed_canvas must be a list of token ids.", param=_XARGS)
    if not all(0 <= t < vocab_size for t in canvas):
        raise VllmBadRequest(f"diffusion_seed_canvas ids must be in [0, {vocab_size}).",
                            param=_XARGS)
    if len(canvas) != width:
        raise VllmBadRequest(f"diffusion_seed_canvas must hold exactly {width} ids, got "
                            f"{len(canvas)}.", param=_XARGS)
    return tuple(canvas)


def _check_pinned(xargs: Mapping[str, Any], canvas: tuple[int, ...] | None,
                  width: int) -> tuple[int, ...] | None:
    pinned = xargs.get("diffusion_pinned")
    if pinned is None:
        return None
    if not isinstance(pinned, list) or not all(_is_int(p) for p in pinned):
        raise VllmBadRequest("diffusion_pinned must be a list of canvas positions.", param=_XARGS)
    if canvas is None:
        raise VllmBadRequest("diffusion_pinned needs a diffusion_seed_canvas to hold.",
                            param=_XARGS)
    if not all(0 <= p < width for p in pinned):
        raise VllmBadRequest("diffusion_pinned positions must lie inside the canvas.",
                            param=_XARGS)
    return tuple(pinned)


def _max_tokens(body: Mapping[str, Any], width: int) -> int:
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        return width
    if not _is_int(max_tokens) or max_tokens < 1:
        raise VllmBadRequest(f"max_tokens must be at least 1, got {max_tokens}.",
                            param="max_tokens", value=max_tokens)
    return int(max_tokens)


def _positive_int(value: Any, name: str) -> int:
    if not _is_int(value) or value <= 0:
        raise VllmBadRequest(f"{name} must be a positive integer.", param=_XARGS)
    return int(value)


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool) or value in (0, 1):
        return bool(value)
    raise VllmBadRequest(f"{name} must be a boolean (or 0/1).", param=_XARGS)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
