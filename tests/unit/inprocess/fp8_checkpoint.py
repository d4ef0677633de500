"""A tiny FP8 DiffusionGemma checkpoint in the format llm-compressor writes, made with
compressed-tensors' own API (llm-compressor 0.14 pins ``transformers<=5.17``, older than the
first DiffusionGemma, so it cannot be installed beside the engine).

It follows llm-compressor's one-shot ``FP8_DYNAMIC`` run step by step:

1. the experts are unpacked into one ``DiffusionGemmaText4MLP`` per expert, registered as the
   children ``0..E-1`` of the experts module (llm-compressor's permanent MoE calibration
   module for DiffusionGemma), so that they are ``nn.Linear`` targets;
2. ``apply_quantization_config`` with the ``FP8_DYNAMIC`` preset on ``Linear`` targets and the
   ignore list of llm-compressor's Gemma 4 example (``lm_head``, embeddings, routers, vision);
3. each weight's scale from its per-channel min and max (``calculate_qparams``, which
   llm-compressor's min-max weight observer calls), status frozen;
4. ``ModelCompressor.from_pretrained_model`` + ``compress_model``, ``save_pretrained`` and
   ``update_config`` (what llm-compressor's ``save_pretrained`` wrapper does).

``dequantized_dir`` writes the reference: the same weights dequantized to bf16 by
compressed-tensors' decompressor, packed back into transformers' expert layout, unquantized.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

ct = pytest.importorskip("compressed_tensors", reason="the FP8 tests need the `dev` extra's "
                         "compressed-tensors (pip install -e '.[dev,engine]')")

from compressed_tensors.compressors import ModelCompressor  # noqa: E402
from compressed_tensors.compressors.naive_quantized.base import (  # noqa: E402
    FloatQuantizationCompressor,
)
from compressed_tensors.quantization import (  # noqa: E402
    QuantizationConfig,
    QuantizationStatus,
    apply_quantization_config,
    preset_name_to_scheme,
)
from compressed_tensors.quantization.utils import calculate_qparams  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion  # noqa: E402
from transformers.models.diffusion_gemma.modeling_diffusion_gemma import (  # noqa: E402
    DiffusionGemmaText4MLP,
    DiffusionGemmaTextExperts,
)

from app.inprocess.tiny import build_tiny_model, rounded_vocab  # noqa: E402
from app.tokenizer.hf import standin_path  # noqa: E402

__all__ = ["IGNORE", "dequantized_dir", "make_fp8_dir", "nvfp4_quantization_config"]

#: llm-compressor's Gemma 4 FP8 example's ignore list
IGNORE = ["lm_head", "re:.*embed.*", "re:.*router", "re:.*vision_tower.*"]


class UnpackedExperts(torch.nn.Module):
    """One MLP per expert, children ``0..E-1`` (the layout llm-compressor saves)."""

    def __init__(self, experts: DiffusionGemmaTextExperts, text_config: Any) -> None:
        super().__init__()
        half = int(text_config.moe_intermediate_size)
        for i in range(experts.num_experts):
            mlp = DiffusionGemmaText4MLP(text_config, layer_idx=0).to(experts.down_proj.dtype)
            mlp.gate_proj.weight.data = experts.gate_up_proj.data[i, :half].clone()
            mlp.up_proj.weight.data = experts.gate_up_proj.data[i, half:].clone()
            mlp.down_proj.weight.data = experts.down_proj.data[i].clone()
            self.add_module(str(i), mlp)


def _unpack_experts(model: DiffusionGemmaForBlockDiffusion) -> None:
    text = model.config.get_text_config(decoder=True)
    for name, module in list(model.named_modules()):
        if isinstance(module, DiffusionGemmaTextExperts):
            parent, _, child = name.rpartition(".")
            model.get_submodule(parent).add_module(child, UnpackedExperts(module, text))


def _calibrate_weights(model: torch.nn.Module) -> int:
    count = 0
    for module in model.modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is None:
            continue
        weight = module.weight.data
        if scheme.weights.strategy == "tensor":
            low, high = weight.amin().reshape(1), weight.amax().reshape(1)
        else:  # channel: one scale per output row
            low, high = weight.amin(dim=1, keepdim=True), weight.amax(dim=1, keepdim=True)
        scale, _ = calculate_qparams(low, high, scheme.weights)
        module.weight_scale.data = scale.to(module.weight_scale.dtype)
        module.quantization_status = QuantizationStatus.FROZEN
        count += 1
    return count


def _save_tokenizer(out: Path) -> None:
    source = Path(standin_path())
    AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(out))
    shutil.copy(source / "chat_template.jinja", out / "chat_template.jinja")


def make_fp8_dir(out: Path, *, layers: int = 3, seed: int = 3,
                 weight_strategy: str = "channel") -> Path:
    """The tiny model (bf16), FP8-dynamic as llm-compressor saves it, with the stand-in
    tokenizer (``weight_strategy`` "tensor": one scale per weight instead of per channel)."""
    out.mkdir(parents=True, exist_ok=True)
    vocab = rounded_vocab(len(AutoTokenizer.from_pretrained(standin_path())))
    model = build_tiny_model(vocab, layers=layers, seed=seed).to(torch.bfloat16)
    _unpack_experts(model)
    scheme = preset_name_to_scheme("FP8_DYNAMIC", ["Linear"])
    scheme.weights = scheme.weights.model_copy(update={"strategy": weight_strategy})
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme},
                                                        ignore=IGNORE), show_progress=False)
    assert _calibrate_weights(model) > 0
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    model.save_pretrained(str(out))
    compressor.update_config(str(out))
    _save_tokenizer(out)
    return out


def dequantized_dir(fp8_dir: Path, out: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """The checkpoint at ``fp8_dir`` dequantized to ``dtype`` by compressed-tensors'
    decompressor, experts packed as transformers keeps them: an ordinary unquantized
    checkpoint."""
    config = DiffusionGemmaForBlockDiffusion.config_class.from_pretrained(str(fp8_dir))
    qconfig = QuantizationConfig.model_validate(config.quantization_config)
    scheme = next(iter(qconfig.config_groups.values()))
    del config.quantization_config
    tensors = load_file(str(fp8_dir / "model.safetensors"))
    plain: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        if name.endswith(".weight_scale"):
            continue
        base = name.removesuffix(".weight")
        if f"{base}.weight_scale" in tensors:
            scale = tensors[f"{base}.weight_scale"].to(dtype)
            local = {"weight": tensor, "weight_scale": scale}
            tensor = FloatQuantizationCompressor.decompress(local, scheme)["weight"]
        plain[name] = tensor.to(dtype)
    model = DiffusionGemmaForBlockDiffusion(config).to(dtype)
    model.load_state_dict(_packed(plain, model), strict=True)
    model.save_pretrained(str(out))
    _save_tokenizer(out)
    return out


def _packed(plain: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    state = {}
    for name in model.state_dict():
        if name.endswith(".experts.gate_up_proj"):
            base = name.removesuffix(".gate_up_proj")
            count = model.get_submodule(base).num_experts
            state[name] = torch.stack([torch.cat([plain[f"{base}.{i}.gate_proj.weight"],
                                                  plain[f"{base}.{i}.up_proj.weight"]])
                                       for i in range(count)])
        elif name.endswith(".experts.down_proj"):
            base = name.removesuffix(".down_proj")
            count = model.get_submodule(base).num_experts
            state[name] = torch.stack([plain[f"{base}.{i}.down_proj.weight"]
                                       for i in range(count)])
        elif name in plain:
            state[name] = plain[name]
        else:  # tied to the embeddings
            state[name] = model.state_dict()[name]
    return state


def nvfp4_quantization_config() -> dict[str, Any]:
    """The ``quantization_config`` compressed-tensors writes for llm-compressor's NVFP4
    preset."""
    scheme = preset_name_to_scheme("NVFP4", ["Linear"])
    config = QuantizationConfig(config_groups={"group_0": scheme}, ignore=IGNORE,
                                format="nvfp4-pack-quantized",
                                quantization_status=QuantizationStatus.COMPRESSED)
    return {"quant_method": "compressed-tensors", "version": ct.__version__,
            **config.model_dump(exclude={"quant_method"})}
