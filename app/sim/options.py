"""``SimOptions``: everything ``dreads sim`` and ``start_sim_thread`` can be told."""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.types import DEFAULT_CANVAS, DEFAULT_MODEL, STANDIN

__all__ = ["SimOptions"]


@dataclass(frozen=True)
class SimOptions:
    host: str = "127.0.0.1"
    port: int = 0  #: 0 = a free port
    model: str = DEFAULT_MODEL  #: served model name
    canvas_length: int = DEFAULT_CANVAS  #: served canvas (vLLM --diffusion-config canvas_length)
    max_model_len: int = 8192
    tokenizer: str = STANDIN
    vocab: int | None = None  #: None = the tokenizer's length
    noise: float = 0.5  #: how much the slot's noise token moves the logits
    separation: float = 1.5  #: with a key: the true label's mean logit lead (ranking quality)
    miscalibration: float = 0.0  #: logits x (1 + m), first label -m: miscalibrated, same ranking
    #: with a key: on a canvas that asks several questions (a joint read), the true label's
    #: lead is scaled by 1 - j and the first label pushed down (``scorer.JOINT_PUSH``), so
    #: joint reads rank worse and recall less than isolated ones (0: no effect)
    joint_interference: float = 0.0
    key_path: str | None = None  #: JSONL answer key
    step_ms: float = 0.0  #: GPU step; 0 answers at once
    max_batch: int = 256  #: reads per step
    fail_rate: float = 0.0  #: HTTP 500 on the first delivery of a body
    hang_rate: float = 0.0  #: no answer (until the client gives up) on the first delivery
    malformed_rate: float = 0.0  #: a slot row without one label, first delivery
    low_mass_rate: float = 0.0  #: argmax not a label, low label mass (every delivery)
    down_for_s: float = 0.0  #: refuse connections for this long after start
    hang_s: float = 600.0  #: longest a hanging request waits for the client to give up
    seed: int = 0
    record_bodies: int = 0  #: keep the last N request bodies (tests)
    engine_model: str | None = None  #: a DiffusionGemma checkpoint: rows from the engine
    engine_device: str = "cpu"  #: with engine_model
    engine_dtype: str = "bfloat16"  #: with engine_model
    api_key: str | None = None  #: like vLLM's --api-key: /v1 routes need this bearer key
    #: the checkpoint's generation-config temperature, used when a read sends none (vLLM
    #: refuses anything but 1.0 on a diffusion read)
    default_temperature: float = 1.0
    #: hosted-API behaviour of /v1/systemone and /v1/decisions (``sim/limits.py``); off: 0/None
    decision_rps: float = 0.0  #: decision requests per second before 429
    decision_max_concurrent: int = 0  #: decision requests at once before 429
    refuse_marker: str | None = None  #: refuse questions whose instructions contain this
    #: like vLLM's ``--limit-mm-per-prompt '{"image": N}'``: images one chat read may carry
    #: (vLLM's default for a model that sets no limit of its own, as Gemma 4: 999)
    image_limit: int = 999
