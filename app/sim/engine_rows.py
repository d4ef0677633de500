"""The simulator's hook for ``dreads sim --engine transformers --model PATH``: logprob rows from
the transformers engine instead of the synthetic scorer, so a decision read over HTTP through the
simulator gets what the in-process engine gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.engine.types import Endpoint, ReadRequest
from app.engine.vllm_rules import ReadSpec
from app.inprocess.engine import TransformersUpstream
from app.sim.scorer import Row

__all__ = ["EngineRows"]


class EngineRows:
    """Every canvas position's row (argmax + requested ids) from one DiffusionGemma read."""

    def __init__(self, model_path: str, *, device: str = "cpu", dtype: str = "float32",
                 canvas_length: int | None = None) -> None:
        from app.tokenizer.hf import load_tokenizer

        self.upstream = TransformersUpstream(model_path, tokenizer=load_tokenizer(model_path),
                                             device=device, dtype=dtype,
                                             canvas_length=canvas_length)

    async def __call__(self, body: Mapping[str, Any], spec: ReadSpec, *, chat: bool
                       ) -> list[Row]:
        request = ReadRequest(
            unit=0, draw=0, seed=0, endpoint=Endpoint.CHAT if chat else Endpoint.COMPLETIONS,
            body=body, slots=tuple(range(spec.rows)), logprob_ids=spec.logprob_ids)
        result = await self.upstream.read(request)
        return [
            Row(result.rows[p].argmax_id, result.rows[p].argmax_logprob,
                dict(result.rows[p].logprobs))
            for p in range(spec.rows)
        ]
