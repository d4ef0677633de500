"""Which weight format a DiffusionGemma checkpoint is in, from its ``config.json``.

The engine reads unquantized checkpoints (bf16, float32) and compressed-tensors' FP8
``float-quantized`` format as llm-compressor writes it (``FP8_DYNAMIC``: FP8 weights with one
scale per output channel, inputs quantized per token on the fly; ``FP8`` weight-only works
too). Anything else is refused at load with the format's name and what to use instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.errors import ConfigError

__all__ = ["Fp8Scheme", "read_fp8_scheme"]

COMPRESSED_TENSORS = "compressed-tensors"
FLOAT_QUANTIZED = "float-quantized"
_WEIGHT_STRATEGIES = ("channel", "tensor")
_INSTEAD = ("use the bf16 checkpoint (google/diffusiongemma-26B-A4B-it) or an FP8-dynamic "
            "compressed-tensors one (RedHatAI/diffusiongemma-26B-A4B-it-FP8-dynamic), or serve "
            "this one with vLLM")


@dataclass(frozen=True)
class Fp8Scheme:
    """An FP8 checkpoint's scheme: ``dynamic`` inputs (per token) or weight-only, and one scale
    per output channel or per weight (``weight_strategy``). Which modules are quantized is read
    from the tensors (those with a ``weight_scale``), not from the config's ignore list."""

    dynamic: bool
    weight_strategy: str

    def describe(self) -> str:
        inputs = "dynamic per-token FP8 inputs" if self.dynamic else "inputs unquantized"
        return (f"fp8 {COMPRESSED_TENSORS} {FLOAT_QUANTIZED} ({self.weight_strategy} weight "
                f"scales, {inputs})")


def read_fp8_scheme(path: str) -> Fp8Scheme | None:
    """The FP8 scheme of the checkpoint at ``path`` (a local directory), or None when it is not
    quantized (or not local: a hub id is left to transformers).

    Raises:
        ConfigError: quantized in a format the engine cannot read (the message names it).
    """
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        return None
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {config_file}: {exc}") from exc
    quant = config.get("quantization_config") if isinstance(config, dict) else None
    if not quant:
        return None
    return _scheme(quant, path)


def _refuse(path: str, what: str) -> ConfigError:
    return ConfigError(f"the checkpoint at {path!r} is quantized as {what}, which the "
                       f"transformers engine cannot read: {_INSTEAD}")


def _scheme(quant: Mapping[str, Any], path: str) -> Fp8Scheme:
    method = str(quant.get("quant_method", "unknown"))
    if method != COMPRESSED_TENSORS:
        raise _refuse(path, f"{method!r} (quant_method)")
    groups = quant.get("config_groups") or {}
    if quant.get("kv_cache_scheme"):
        raise _refuse(path, f"{COMPRESSED_TENSORS} with a quantized KV cache")
    if quant.get("transform_config"):
        raise _refuse(path, f"{COMPRESSED_TENSORS} with transforms (rotations)")
    if not groups:
        raise _refuse(path, f"{COMPRESSED_TENSORS} without config_groups")
    top = quant.get("format")
    schemes = {_group_scheme(path, group, top) for group in groups.values()}
    if len(schemes) > 1:
        raise _refuse(path, f"{COMPRESSED_TENSORS} with groups of different schemes")
    dynamic, strategy = schemes.pop()
    return Fp8Scheme(dynamic=dynamic, weight_strategy=strategy)


def _group_scheme(path: str, group: Mapping[str, Any], top: Any) -> tuple[bool, str]:
    """(dynamic inputs, weight strategy) of one config group, or the refusal."""
    fmt = str(group.get("format") or top or "unknown")
    weights = group.get("weights") or {}
    bits, kind = weights.get("num_bits"), weights.get("type")
    strategy = str(weights.get("strategy"))
    if fmt != FLOAT_QUANTIZED or (bits, kind) != (8, "float"):
        what = f"{bits}-bit {kind}" if weights else "no weights"
        raise _refuse(path, f"{COMPRESSED_TENSORS} {fmt!r} ({what} weights)")
    if strategy not in _WEIGHT_STRATEGIES or not weights.get("symmetric", True):
        raise _refuse(path, f"{COMPRESSED_TENSORS} FP8 with {strategy} weight scales "
                            f"(the engine reads {' or '.join(_WEIGHT_STRATEGIES)} scales)")
    if group.get("output_activations"):
        raise _refuse(path, f"{COMPRESSED_TENSORS} FP8 with quantized outputs")
    inputs = group.get("input_activations")
    if not inputs:
        return False, strategy
    dynamic_token = (inputs.get("num_bits"), inputs.get("type"), inputs.get("strategy"),
                     bool(inputs.get("dynamic"))) == (8, "float", "token", True)
    if not dynamic_token:
        raise _refuse(path, f"{COMPRESSED_TENSORS} FP8 with {inputs.get('strategy')} "
                            f"{'dynamic' if inputs.get('dynamic') else 'static'} input scales "
                            "(the engine reads dynamic per-token inputs)")
    return True, strategy
