"""The simulator's copy of vLLM's request validation for diffusion reads (protocol.md 4 and 7).

Every rule raises ``SimBadRequest``; the app answers it with vLLM's 400 body
``{"error": {"message", "type": "BadRequestError", "param", "code": 400}}`` (``param`` is
``extra_args`` for the ``vllm_xargs`` rules).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_LOGPROB_TOKEN_IDS", "ReadSpec", "SimBadRequest", "error_body", "validate_read"]

#: vllm/sampling_params.py's per-request cap on ``logprob_token_ids``.
MAX_LOGPROB_TOKEN_IDS = 128

_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError"}
_UNSUPPORTED = "sampling parameters are not yet supported with diffusion models."
_STRUCTURED = "Structured outputs are not yet supported for diffusion language models"


class SimBadRequest(Exception):
    """A request vLLM would answer with 400."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class ReadSpec:
    """A validated read: what the scorer needs."""

    canvas: tuple[int, ...]
    width: int
    rows: int  #: logprob rows answered: min(max_tokens, width)
    logprob_ids: tuple[int, ...]
    pinned: tuple[int, ...] | None
    constrained: bool


def error_body(message: str, param: str | None, code: int = 400) -> dict[str, Any]:
    """vLLM's error response body."""
    kind = _ERROR_TYPES.get(code, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def validate_read(
    body: Any, *, chat: bool, canvas_length: int, vocab_size: int
) -> ReadSpec:
    """Check a chat or completions body as vLLM does and return the read it asks for."""
    if not isinstance(body, Mapping):
        raise SimBadRequest("the request body must be a JSON object")
    _check_sampling(body)
    _check_prompt(body, chat=chat)
    logprob_ids = _check_logprobs(body, chat=chat, vocab_size=vocab_size)
    xargs = body.get("vllm_xargs") or {}
    if not isinstance(xargs, Mapping):
        raise SimBadRequest("vllm_xargs must be an object", param="vllm_xargs")
    width = _check_width(xargs, canvas_length)
    canvas = _check_seed_canvas(xargs, width, vocab_size)
    pinned = _check_pinned(xargs, canvas, width)
    if canvas is None:
        raise SimBadRequest(
            "dreads sim needs diffusion_seed_canvas on every read", param="extra_args"
        )
    _positive_int(xargs.get("diffusion_max_steps", 1), "diffusion_max_steps")
    constrained = _flag(xargs.get("diffusion_constrained", False), "diffusion_constrained")
    if constrained and not logprob_ids:
        raise SimBadRequest(
            "diffusion_constrained requires a non-empty logprob_token_ids", param="extra_args"
        )
    read_only = _flag(xargs.get("diffusion_read_only", False), "diffusion_read_only")
    if not read_only:
        raise SimBadRequest(
            "dreads sim only serves read-only diffusion requests (diffusion_read_only: true)",
            param="extra_args",
        )
    max_tokens = _max_tokens(body, width)
    return ReadSpec(canvas, width, min(max_tokens, width), logprob_ids, pinned, constrained)


def _check_sampling(body: Mapping[str, Any]) -> None:
    temperature = body.get("temperature")
    if temperature is not None and float(temperature) != 1.0:
        raise SimBadRequest(f"temperature != 1.0 {_UNSUPPORTED}", param="temperature")
    if body.get("seed") is not None:
        raise SimBadRequest(f"seed {_UNSUPPORTED}", param="seed")
    for name in ("min_p", "min_tokens"):
        value = body.get(name)
        if value is not None and float(value) > 0:
            raise SimBadRequest(f"{name} {_UNSUPPORTED}", param=name)
    for name in ("logit_bias", "bad_words", "allowed_token_ids"):
        if body.get(name):
            raise SimBadRequest(f"{name} {_UNSUPPORTED}", param=name)
    for name in ("response_format", "structured_outputs", "guided_json", "guided_regex"):
        if body.get(name):
            raise SimBadRequest(_STRUCTURED, param=name)


def _check_prompt(body: Mapping[str, Any], *, chat: bool) -> None:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise SimBadRequest("messages must be a non-empty list", param="messages")
        return
    prompt = body.get("prompt")
    if not isinstance(prompt, (list, str)) or not prompt:
        raise SimBadRequest("prompt must be a non-empty list of token ids", param="prompt")


def _check_logprobs(body: Mapping[str, Any], *, chat: bool, vocab_size: int) -> tuple[int, ...]:
    logprobs = body.get("logprobs")
    if chat and logprobs is not True:
        raise SimBadRequest("a diffusion read needs logprobs: true", param="logprobs")
    if not chat and (isinstance(logprobs, bool) or not isinstance(logprobs, int)):
        raise SimBadRequest("a diffusion read needs logprobs as an integer", param="logprobs")
    if isinstance(logprobs, int) and not chat and logprobs < 0 and logprobs != -1:
        raise SimBadRequest(f"logprobs must be non-negative, got {logprobs}", param="logprobs")
    ids = _int_list(body.get("logprob_token_ids") or [], "logprob_token_ids",
                    param="logprob_token_ids")
    if len(ids) > MAX_LOGPROB_TOKEN_IDS:
        raise SimBadRequest(
            f"Requested logprob_token_ids of length {len(ids)}, which is greater than max "
            f"allowed: {MAX_LOGPROB_TOKEN_IDS}",
            param="logprob_token_ids",
        )
    _check_below(ids, vocab_size, "logprob_token_ids", "vocabulary", param="logprob_token_ids")
    return tuple(ids)


def _check_width(xargs: Mapping[str, Any], canvas_length: int) -> int:
    width = xargs.get("diffusion_canvas_length", canvas_length)
    if not _is_int(width) or width <= 0:
        raise SimBadRequest(
            f"diffusion_canvas_length must be a positive int, got {width!r}", param="extra_args"
        )
    if width > canvas_length:
        raise SimBadRequest(
            f"diffusion_canvas_length {width} exceeds the served canvas_length {canvas_length}",
            param="extra_args",
        )
    return int(width)


def _check_seed_canvas(
    xargs: Mapping[str, Any], width: int, vocab_size: int
) -> tuple[int, ...] | None:
    canvas = xargs.get("diffusion_seed_canvas")
    if canvas is None:
        return None
    canvas = _int_list(canvas, "diffusion_seed_canvas", param="extra_args")
    if len(canvas) != width:
        raise SimBadRequest(
            f"diffusion_seed_canvas has length {len(canvas)} but the canvas length is {width}",
            param="extra_args",
        )
    _check_below(canvas, vocab_size, "diffusion_seed_canvas ids", "vocabulary",
                 param="extra_args")
    return tuple(canvas)


def _check_pinned(
    xargs: Mapping[str, Any], canvas: tuple[int, ...] | None, width: int
) -> tuple[int, ...] | None:
    pinned = xargs.get("diffusion_pinned")
    if pinned is None:
        return None
    if canvas is None:
        raise SimBadRequest("diffusion_pinned requires diffusion_seed_canvas", param="extra_args")
    pinned = _int_list(pinned, "diffusion_pinned", param="extra_args")
    _check_below(pinned, width, "diffusion_pinned positions", "range", param="extra_args")
    return tuple(pinned)


def _int_list(value: Any, name: str, *, param: str) -> list[int]:
    if not isinstance(value, list) or not all(_is_int(i) for i in value):
        raise SimBadRequest(f"{name} must be a list of ints", param=param)
    return value


def _check_below(values: list[int], limit: int, what: str, domain: str, *, param: str) -> None:
    """Every value in [0, limit), else name the first five that are not."""
    bad = [i for i in values if not 0 <= i < limit]
    if bad:
        raise SimBadRequest(f"{what} {bad[:5]} out of {domain} [0, {limit})", param=param)


def _max_tokens(body: Mapping[str, Any], width: int) -> int:
    max_tokens = body.get("max_tokens", width)
    if max_tokens is None:
        return width
    if not _is_int(max_tokens) or max_tokens < 1:
        raise SimBadRequest(f"max_tokens must be at least 1, got {max_tokens}", param="max_tokens")
    return int(max_tokens)


def _positive_int(value: Any, name: str) -> int:
    if not _is_int(value) or value <= 0:
        raise SimBadRequest(f"{name} must be a positive int, got {value!r}", param="extra_args")
    return int(value)


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool) or value in (0, 1):
        return bool(value)
    raise SimBadRequest(f"{name} must be a bool or 0/1, got {value!r}", param="extra_args")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
