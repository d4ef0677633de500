"""vLLM's response shapes for read-only diffusion requests (protocol.md section 5).

As vLLM 0.33 writes them: a chat logprob entry's ``bytes`` is the list of the UTF-8 bytes of its
decoded token, a ``top_logprobs`` entry's the bytes of its ``token`` text (``token_id:N``);
logprobs are floored at -9999; the assistant message has no ``tool_calls``; ``/v1/models``
reports ``max_model_len`` but not the canvas length (only a read at full width proves it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.sim.scorer import Row

__all__ = ["chat_response", "completions_response", "models_response", "usage"]


def _tok(token_id: int) -> str:
    return f"token_id:{token_id}"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


_FLOOR = -9999.0


def _top(token_id: int, logprob: float) -> dict[str, Any]:
    token = _tok(token_id)
    return {"token": token, "logprob": max(logprob, _FLOOR), "bytes": list(token.encode())}


def _chat_entry(row: Row, piece: Callable[[int], str]) -> dict[str, Any]:
    top = [_top(row.argmax_id, row.argmax_logprob)]
    top.extend(_top(i, lp) for i, lp in row.logprobs.items() if i != row.argmax_id)
    decoded = piece(row.argmax_id).encode("utf-8", errors="replace")
    return {"token": _tok(row.argmax_id), "logprob": max(row.argmax_logprob, _FLOOR),
            "bytes": list(decoded), "top_logprobs": top}


def chat_response(request_id: str, model: str, created: int, rows: Sequence[Row], text: str,
                  usage_info: dict[str, Any], piece: Callable[[int], str]) -> dict[str, Any]:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "logprobs": {"content": [_chat_entry(row, piece) for row in rows]},
        "finish_reason": "length",
        "stop_reason": None,
    }
    return {"id": request_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [choice], "usage": usage_info}


def completions_response(request_id: str, model: str, created: int, rows: Sequence[Row],
                         text: str, usage_info: dict[str, Any]) -> dict[str, Any]:
    top: list[dict[str, float]] = []
    for row in rows:
        entry = {_tok(i): max(lp, _FLOOR) for i, lp in row.logprobs.items()}
        entry[_tok(row.argmax_id)] = max(row.argmax_logprob, _FLOOR)
        top.append(entry)
    logprobs = {
        "tokens": [_tok(row.argmax_id) for row in rows],
        "token_logprobs": [max(row.argmax_logprob, _FLOOR) for row in rows],
        "top_logprobs": top,
        "text_offset": list(range(len(rows))),
    }
    choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length",
              "stop_reason": None}
    return {"id": request_id, "object": "text_completion", "created": created, "model": model,
            "choices": [choice], "usage": usage_info}


def models_response(model: str, created: int, max_model_len: int) -> dict[str, Any]:
    entry = {
        "id": model, "object": "model", "created": created, "owned_by": "vllm",
        "root": model, "parent": None, "max_model_len": max_model_len, "permission": [],
    }
    return {"object": "list", "data": [entry]}
