"""Load a compressed-tensors FP8 DiffusionGemma checkpoint (``quant_format``) as llm-compressor
writes it.

On disk every quantized ``nn.Linear`` holds ``weight`` (float8_e4m3fn) and ``weight_scale``;
the experts were unpacked for calibration (llm-compressor's permanent MoE calibration module),
so each layer's experts are ``experts.{i}.gate_proj|up_proj|down_proj`` linear layers, not
transformers' packed ``gate_up_proj`` / ``down_proj``. The ignored modules (router, embeddings,
``lm_head``, the vision tower) are plain tensors.

The model is built with its parameters on the meta device (buffers, computed from the config,
are real) and without its image encoder (``VISION``), quantized linear layers become
``Fp8Linear``, each experts module gets FP8 ``(experts, out, in)`` weights, and every tensor is
then read from the safetensors files straight into its place on the device: the weights are
never held in bf16.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

from app.errors import ConfigError
from app.inprocess.fp8 import (
    FP8_EXPERTS,
    Fp8Linear,
    pack_expert_weights,
    register_fp8_experts,
)
from app.inprocess.quant_format import Fp8Scheme

__all__ = ["VISION", "checkpoint_keys", "drop_vision", "load_fp8_checkpoint", "local_checkpoint",
           "parameters_on_meta", "skeleton"]

#: the image encoder's modules: neither built nor loaded with the model (text reads never run
#: them); ``vision.load_vision`` reads them at the first read with images
VISION = ("model.encoder.vision_tower", "model.encoder.embed_vision")

_SCALE = ".weight_scale"
_EXPERT = re.compile(r"^(?P<experts>.+\.experts)\.(?P<index>\d+)\.(?P<proj>gate_proj|up_proj|"
                     r"down_proj)\.(?P<what>weight|weight_scale)$")


def checkpoint_keys(path: str) -> dict[str, Path]:
    """Every tensor name of the safetensors checkpoint at ``path`` and the file holding it."""
    root = Path(path)
    index = root / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return {name: root / file for name, file in weight_map.items()}
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"no *.safetensors files in {path!r}")
    keys: dict[str, Path] = {}
    for file in files:
        with safe_open(str(file), "pt") as handle:
            keys.update(dict.fromkeys(handle.keys(), file))
    return keys


def load_fp8_checkpoint(path: str, scheme: Fp8Scheme, *, device: str,
                        dtype: torch.dtype) -> DiffusionGemmaForBlockDiffusion:
    """The FP8 checkpoint at ``path`` on ``device``: unquantized tensors in ``dtype``, the
    quantized ones in FP8 with float32 scales, experts through ``fp8_experts``.

    Raises:
        ConfigError: the files do not match the model (names of missing or unexpected tensors,
            or copies of one shared weight that differ).
    """
    keys = checkpoint_keys(path)
    model = skeleton(path, dtype, scheme=scheme, keys=keys)
    _materialize(model, device)
    _load_tensors(model, keys, _experts_modules(model), device)
    register_fp8_experts()
    model.set_experts_implementation(FP8_EXPERTS)
    return model.eval()


def skeleton(path: str, dtype: torch.dtype, *, scheme: Fp8Scheme | None = None,
             keys: dict[str, Path] | None = None) -> DiffusionGemmaForBlockDiffusion:
    """The model of the checkpoint at ``path`` with its parameters on the meta device (no
    memory; buffers real, on the CPU): with ``scheme``, its quantized linear layers as
    ``Fp8Linear`` and its experts packed in FP8. Weights the encoder and decoder share stay
    shared."""
    config = DiffusionGemmaConfig.from_pretrained(path)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with parameters_on_meta():
        model = DiffusionGemmaForBlockDiffusion._from_config(config, dtype=dtype)
    drop_vision(model)
    if scheme is None:
        return model
    keys = checkpoint_keys(path) if keys is None else keys
    quantized = {name.removesuffix(_SCALE) for name in keys if name.endswith(_SCALE)}
    _install_fp8_linears(model, {q for q in quantized if not _EXPERT.match(q + _SCALE)},
                         scheme.dynamic)
    for group in _shared(_experts_modules(model), "gate_up_proj"):
        if any(f"{name}.0.gate_proj{_SCALE}" in keys for name, _ in group):
            pack_expert_weights(group[0][1], dynamic=scheme.dynamic)
            for _, module in group[1:]:  # the decoder's experts are the encoder's
                _share_experts(group[0][1], module)
    return model


def _shared(modules: dict[str, Any], attribute: str) -> list[list[tuple[str, Any]]]:
    """``modules`` grouped by the parameter ``attribute`` they share (DiffusionGemma's encoder
    and decoder layers share theirs), in model order."""
    groups: dict[int, list[tuple[str, Any]]] = {}
    for name, module in modules.items():
        groups.setdefault(id(getattr(module, attribute)), []).append((name, module))
    return list(groups.values())


def drop_vision(model: torch.nn.Module) -> None:
    """Remove the image encoder (``VISION``) from a DiffusionGemma: text reads never run it
    (``vision.py`` loads it again for the first read with images)."""
    for name in VISION:
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, None)


def _share_experts(source: Any, target: Any) -> None:
    for name in ("gate_up_proj", "down_proj", "gate_up_proj_scale", "down_proj_scale"):
        setattr(target, name, getattr(source, name))
    target.fp8_dynamic, target.use_fp8 = source.fp8_dynamic, source.use_fp8
    target.fp8_fast_accum, target.fp8_fused = source.fp8_fast_accum, source.fp8_fused


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Parameters registered inside go to the meta device (no memory); buffers stay real."""
    original = torch.nn.Module.register_parameter

    def register(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)

    torch.nn.Module.register_parameter = register  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]


def _experts_modules(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    return {name: module for name, module in model.named_modules(remove_duplicate=False)
            if type(module).__name__.endswith("TextExperts")}


def _install_fp8_linears(model: torch.nn.Module, names: set[str], dynamic: bool) -> None:
    """``names`` become ``Fp8Linear``, and with each every linear layer sharing its weight
    (one module for all of them)."""
    linears = {name: module for name, module in model.named_modules(remove_duplicate=False)
               if isinstance(module, torch.nn.Linear)}
    by_weight = {id(group[0][1].weight): group for group in _shared(linears, "weight")}
    for name in sorted(names):
        linear = linears.get(name)
        if linear is None:
            raise ConfigError(f"the checkpoint quantizes {name!r}, which is no linear layer of "
                              "DiffusionGemma")
        if linear.bias is not None:
            raise ConfigError(f"the checkpoint quantizes {name!r}, a linear layer with a bias")
        layer = Fp8Linear(linear.in_features, linear.out_features, dynamic=dynamic,
                          device="meta")
        for shared_name, _ in by_weight.pop(id(linear.weight), []):
            parent, _, child = shared_name.rpartition(".")
            setattr(model.get_submodule(parent), child, layer)


def _materialize(model: torch.nn.Module, device: str) -> None:
    """Give every meta parameter uninitialised memory on ``device``, in its own dtype (the
    skeleton's: the model's, FP8, float32 scales), once per tied group; the loader fills them
    all."""
    made: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None or param.device.type != "meta":
                continue
            if id(param) not in made:
                made[id(param)] = torch.nn.Parameter(
                    torch.empty(param.shape, dtype=param.dtype, device=device),
                    requires_grad=False)
            module._parameters[name] = made[id(param)]
    model.to(device)  # the buffers


def _load_tensors(model: torch.nn.Module, keys: dict[str, Path],
                  experts: dict[str, torch.nn.Module], device: str) -> None:
    """Every tensor of the checkpoint into its place; a second copy of a shared weight (the
    encoder's and decoder's, saved apart once quantization untied them) must equal the first."""
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers())
    filled: set[tuple[int, str]] = set()
    unexpected: list[str] = []
    for name, tensor in _tensors({k: f for k, f in keys.items()
                                  if not k.startswith(tuple(f"{v}." for v in VISION))}):
        match = _EXPERT.match(name)
        target = _expert_slice(match, experts) if match else None
        if target is None:
            target = params.get(name, buffers.get(name))
        if target is None:
            unexpected.append(name)
            continue
        where = _place(name, match, params, buffers)
        if where in filled:
            _check_copy(name, target, tensor, device)
        else:
            _fill(target, tensor, device)
            filled.add(where)
    filled_ids = {place for place, _ in filled}
    missing = [name for name, param in params.items() if id(param) not in filled_ids]
    if unexpected or missing:
        raise ConfigError(f"the checkpoint does not match DiffusionGemma: unexpected tensors "
                          f"{unexpected[:5]}, missing {missing[:5]}")


def _place(name: str, match: re.Match[str] | None, params: dict[str, Any],
           buffers: dict[str, Any]) -> tuple[int, str]:
    """The tensor a checkpoint name fills (shared ones once) and which part of it."""
    if match is None:
        return id(params.get(name, buffers.get(name))), ""
    return (id(params[f"{match['experts']}.{_packed_attribute(match)}"]),
            f"{match['index']}.{match['proj']}")


def _tensors(keys: dict[str, Path]) -> Iterator[tuple[str, torch.Tensor]]:
    by_file: dict[Path, list[str]] = {}
    for name, file in keys.items():
        by_file.setdefault(file, []).append(name)
    for file, names in by_file.items():
        with safe_open(str(file), "pt") as handle:
            for name in names:
                yield name, handle.get_tensor(name)


def _shaped(target: torch.Tensor, tensor: torch.Tensor, device: str) -> torch.Tensor:
    """``tensor`` on ``device`` in ``target``'s shape (a per-tensor scale for every channel)."""
    value = tensor.to(device)
    if value.shape != target.shape:
        value = value.reshape(-1, 1) if target.shape[-1:] == (1,) else value.reshape(-1)
        value = value.expand(target.shape)
    return value


def _fill(target: torch.Tensor, tensor: torch.Tensor, device: str) -> None:
    with torch.no_grad():
        target.copy_(_shaped(target, tensor, device))


def _check_copy(name: str, target: torch.Tensor, tensor: torch.Tensor, device: str) -> None:
    if not torch.equal(target.float(), _shaped(target, tensor, device).float()):
        raise ConfigError(f"the checkpoint's {name!r} differs from the other copy of the same "
                          "shared weight (DiffusionGemma's encoder and decoder share theirs)")


def _packed_attribute(match: re.Match[str]) -> str:
    """The packed experts parameter an unpacked expert's tensor goes into: gate and up
    projections into ``gate_up_proj``, the down projection into ``down_proj``; a scale into
    the parameter's ``_scale``."""
    packed = "down_proj" if match["proj"] == "down_proj" else "gate_up_proj"
    return packed + ("_scale" if match["what"] == "weight_scale" else "")


def _expert_slice(match: re.Match[str], experts: dict[str, Any]) -> torch.Tensor | None:
    """Where an unpacked expert's tensor goes in its module's packed parameter."""
    module = experts.get(match["experts"])
    if module is None:
        return None
    half = int(module.intermediate_dim)
    rows = {"gate_proj": slice(0, half), "up_proj": slice(half, 2 * half)}.get(
        match["proj"], slice(None))
    return getattr(module, _packed_attribute(match))[int(match["index"]), rows]


def local_checkpoint(path: str) -> str | None:
    """``path`` if it is a directory, else the snapshot of a hub id already in the local cache
    (nothing is downloaded), else None."""
    if Path(path).is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return str(snapshot_download(path, local_files_only=True))
    except Exception:  # not a hub id, or not cached: transformers says why when it loads
        return None
