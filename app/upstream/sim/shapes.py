"""vLLM's response shapes for read-only diffusion requests (protocol.md section 5)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.upstream.sim.scorer import Row

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


def _chat_entry(row: Row) -> dict[str, Any]:
    top = [{"token": _tok(row.argmax_id), "logprob": row.argmax_logprob, "bytes": None}]
    top.extend(
        {"token": _tok(i), "logprob": lp, "bytes": None}
        for i, lp in row.logprobs.items()
        if i != row.argmax_id
    )
    return {"token": _tok(row.argmax_id), "logprob": row.argmax_logprob, "bytes": None,
            "top_logprobs": top}


def chat_response(request_id: str, model: str, created: int, rows: Sequence[Row], text: str,
                  usage_info: dict[str, Any]) -> dict[str, Any]:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text, "tool_calls": []},
        "logprobs": {"content": [_chat_entry(row) for row in rows]},
        "finish_reason": "length",
        "stop_reason": None,
    }
    return {"id": request_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [choice], "usage": usage_info}


def completions_response(request_id: str, model: str, created: int, rows: Sequence[Row],
                         text: str, usage_info: dict[str, Any]) -> dict[str, Any]:
    top: list[dict[str, float]] = []
    for row in rows:
        entry = {_tok(i): lp for i, lp in row.logprobs.items()}
        entry[_tok(row.argmax_id)] = row.argmax_logprob
        top.append(entry)
    logprobs = {
        "tokens": [_tok(row.argmax_id) for row in rows],
        "token_logprobs": [row.argmax_logprob for row in rows],
        "top_logprobs": top,
        "text_offset": list(range(len(rows))),
    }
    choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length",
              "stop_reason": None}
    return {"id": request_id, "object": "text_completion", "created": created, "model": model,
            "choices": [choice], "usage": usage_info}


def models_response(model: str, created: int, max_model_len: int,
                    canvas_length: int) -> dict[str, Any]:
    entry = {
        "id": model, "object": "model", "created": created, "owned_by": "dreads-sim",
        "root": model, "parent": None, "max_model_len": max_model_len,
        "canvas_length": canvas_length, "permission": [],
    }
    return {"object": "list", "data": [entry]}
