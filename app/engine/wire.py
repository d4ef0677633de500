"""Request bodies (protocol.md section 4) and response parsing (section 5).

Bodies are plain dicts and lists, encoded with ``encode_body`` (orjson, sorted keys), so a
repeated read sends byte-identical bytes. Fields vLLM rejects on diffusion models
(``FORBIDDEN_FIELDS``) are never sent; ``temperature`` is sent as exactly 1.0, the only value
vLLM accepts on a diffusion read, so a checkpoint whose generation config sets another default
does not turn every read into a 400.

The thought block rides in the prompt: a completions read sends the prompt ids with it; a chat
read whose unit has a ``prefill`` sends it as a final assistant message that the server
continues (``continue_final_message: true``, ``add_generation_prompt: false``). A message whose
content is a list of parts (a decision's images: its ``image_url`` parts, then the text) is sent
as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from app.engine.noise import seed_canvas
from app.engine.types import Endpoint, ReadRequest, ReadResult, ReadSettings, ReadUnit, SlotRow
from app.errors import MalformedResponse

__all__ = ["FORBIDDEN_FIELDS", "build_request", "encode_body", "parse_response"]

#: Request fields vLLM rejects on diffusion models (HTTP 400); ``temperature`` only when not 1.
FORBIDDEN_FIELDS: frozenset[str] = frozenset({
    "seed", "min_p", "min_tokens", "logit_bias", "bad_words",
    "allowed_token_ids", "response_format", "structured_outputs",
})
#: The one temperature a diffusion read accepts; sent explicitly.
TEMPERATURE = 1.0
TOKEN_PREFIX = "token_id:"


def _xargs(unit: ReadUnit, settings: ReadSettings, canvas: tuple[int, ...]) -> dict[str, Any]:
    xargs: dict[str, Any] = {
        "diffusion_seed_canvas": list(canvas),
        "diffusion_canvas_length": unit.width,
        "diffusion_max_steps": settings.steps,
        "diffusion_read_only": True,
    }
    if settings.steps > 1:
        slots = {s.position for s in unit.slots}
        xargs["diffusion_pinned"] = [p for p in range(unit.width) if p not in slots]
    if settings.constrained:
        xargs["diffusion_constrained"] = True
    return xargs


def _plain(value: Any) -> Any:
    """A copy as plain dicts and lists (a message's content parts included), so the body owns
    its messages and serialises the same way every time."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _messages(unit: ReadUnit) -> dict[str, Any]:
    messages = [_plain(m) for m in unit.messages]
    fields: dict[str, Any] = {"messages": messages, "logprobs": True,
                              "chat_template_kwargs": {"enable_thinking": False}}
    if unit.prefill:
        messages.append({"role": "assistant", "content": unit.prefill})
        fields.update(add_generation_prompt=False, continue_final_message=True)
    return fields


def build_request(unit: ReadUnit, settings: ReadSettings, *, draw: int, seed: int,
                  vocab_size: int, noise: Sequence[int] = ()) -> ReadRequest:
    """The read request of one draw of one unit: the slots' noise drawn from ``seed``, or
    ``noise`` (one id per slot) when given."""
    slots = tuple(s.position for s in unit.slots)
    if noise:
        canvas = list(unit.template_ids)
        for pos, noise_id in zip(slots, noise, strict=True):
            canvas[pos] = noise_id
    else:
        canvas = list(seed_canvas(unit.template_ids, slots, seed, vocab_size))
    body: dict[str, Any] = {
        "model": settings.model,
        "max_tokens": unit.max_tokens,
        "temperature": TEMPERATURE,
        "logprob_token_ids": list(unit.logprob_ids),
        "return_tokens_as_token_ids": True,
        "vllm_xargs": _xargs(unit, settings, tuple(canvas)),
    }
    if settings.endpoint == Endpoint.COMPLETIONS:
        body.update(prompt=list(unit.prompt_ids), logprobs=1)
    else:
        body.update(_messages(unit))
    return ReadRequest(unit=unit.index, draw=draw, seed=seed,
                       endpoint=Endpoint(settings.endpoint), body=body, slots=slots,
                       logprob_ids=unit.logprob_ids, prompt_ids=tuple(unit.prompt_ids))


def encode_body(body: Mapping[str, Any]) -> bytes:
    """Deterministic JSON bytes (orjson, sorted keys)."""
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def _token_id(token: Any, where: str) -> int:
    if isinstance(token, str) and token.startswith(TOKEN_PREFIX):
        try:
            return int(token[len(TOKEN_PREFIX):])
        except ValueError:
            pass
    raise MalformedResponse(f"{where}: token {token!r} is not 'token_id:<id>' "
                            f"(send return_tokens_as_token_ids: true)")


def _get(obj: Any, *path: str | int) -> Any:
    cur = obj
    for key in path:
        try:
            cur = cur[key]
        except (KeyError, IndexError, TypeError):
            dotted = ".".join(str(p) for p in path)
            raise MalformedResponse(f"response has no {dotted}") from None
    return cur


def _row_at(rows: Any, pos: int, what: str) -> Any:
    if not isinstance(rows, list) or not 0 <= pos < len(rows) or rows[pos] is None:
        n = len(rows) if isinstance(rows, list) else 0
        raise MalformedResponse(f"no logprob row for slot position {pos} ({what} has {n} "
                                f"positions)")
    return rows[pos]


def _chat_row(content: Any, pos: int) -> SlotRow:
    entry = _row_at(content, pos, "choices[0].logprobs.content")
    where = f"content[{pos}]"
    try:
        logprobs = {_token_id(e["token"], where): float(e["logprob"])
                    for e in entry.get("top_logprobs") or []}
        argmax, argmax_lp = _token_id(entry["token"], where), float(entry["logprob"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MalformedResponse(f"{where} is not a logprob entry: {exc!r}") from None
    logprobs.setdefault(argmax, argmax_lp)
    return SlotRow(logprobs=logprobs, argmax_id=argmax, argmax_logprob=argmax_lp)


def _completions_row(lp: Any, pos: int) -> SlotRow:
    row = _row_at(lp.get("top_logprobs") if isinstance(lp, Mapping) else None, pos,
                  "choices[0].logprobs.top_logprobs")
    where = f"top_logprobs[{pos}]"
    try:
        logprobs = {_token_id(k, where): float(v) for k, v in row.items()}
    except (TypeError, ValueError, AttributeError) as exc:
        raise MalformedResponse(f"{where} is not a token -> logprob map: {exc!r}") from None
    tokens, token_lps = lp.get("tokens"), lp.get("token_logprobs")
    if isinstance(tokens, list) and isinstance(token_lps, list) and pos < min(
            len(tokens), len(token_lps)) and token_lps[pos] is not None:
        argmax, argmax_lp = _token_id(tokens[pos], f"tokens[{pos}]"), float(token_lps[pos])
    elif logprobs:
        argmax = max(logprobs, key=lambda i: logprobs[i])
        argmax_lp = logprobs[argmax]
    else:
        raise MalformedResponse(f"{where} is empty")
    logprobs.setdefault(argmax, argmax_lp)
    return SlotRow(logprobs=logprobs, argmax_id=argmax, argmax_logprob=argmax_lp)


def _usage(obj: Mapping[str, Any]) -> tuple[int | None, int | None]:
    usage = obj.get("usage")
    if not isinstance(usage, Mapping):
        return None, None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    prompt = usage.get("prompt_tokens")
    return (int(prompt) if prompt is not None else None,
            int(cached) if cached is not None else None)


def parse_response(endpoint: Endpoint, obj: Mapping[str, Any], slots: Sequence[int], *,
                   latency_ms: float = 0.0) -> ReadResult:
    """Slot rows and usage from a chat or completions response.

    Chat rows come from ``choices[0].logprobs.content[pos]``; completions rows from
    ``choices[0].logprobs.top_logprobs[pos]`` with ``tokens``/``token_logprobs`` for the argmax.

    Raises:
        MalformedResponse: a missing row for a slot or an unparsable shape.
    """
    if not isinstance(obj, Mapping):
        raise MalformedResponse(f"response is not a JSON object: {type(obj).__name__}")
    lp = _get(obj, "choices", 0, "logprobs")
    if endpoint == Endpoint.CHAT:
        content = lp.get("content") if isinstance(lp, Mapping) else None
        rows = {pos: _chat_row(content, pos) for pos in slots}
    else:
        rows = {pos: _completions_row(lp, pos) for pos in slots}
    prompt_tokens, cached = _usage(obj)
    return ReadResult(rows=rows, prompt_tokens=prompt_tokens, cached_tokens=cached,
                      latency_ms=latency_ms)
