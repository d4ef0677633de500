"""The image encoder of reads: DiffusionGemma's vision tower and its projection into the text
model (transformers' ``get_image_features``), loaded when the first image read comes.

Text reads never run it, so a checkpoint is loaded without it (``fp8_load.VISION``: an FP8
checkpoint does not build it, an unquantized one drops it after loading). The first read with
images reads its tensors from the checkpoint: in bf16 in both kinds, since llm-compressor
leaves the vision tower unquantized (an ignored module). A model built in memory (tests,
benchmarks) keeps the encoder it was built with.

Features are kept per set of images (``ImageInputs.key``), so the questions of one decision
that read the same images run the tower once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoModel, DiffusionGemmaForBlockDiffusion
from transformers.models.diffusion_gemma.modeling_diffusion_gemma import (
    DiffusionGemmaMultimodalEmbedder,
)

from app.errors import ConfigError
from app.inprocess.fp8_load import VISION, checkpoint_keys, parameters_on_meta
from app.inprocess.images import ImageInputs

__all__ = ["VisionEncoder", "load_vision"]

log = logging.getLogger("dreads.upstream.transformers")


class VisionEncoder:
    """Image features for a ``ReadModel``: loads the encoder from ``source`` (a checkpoint
    directory) the first time it is needed, and keeps the last ``memo`` sets of features."""

    def __init__(self, model: DiffusionGemmaForBlockDiffusion, *, source: str | None,
                 memo: int = 64) -> None:
        self.model = model
        self.source = source
        self.memo = memo
        self._features: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self.model.model.encoder.vision_tower is not None

    def ensure_loaded(self) -> None:
        """Load the image encoder if the model has none.

        Raises:
            ConfigError: the model was loaded from no checkpoint directory, or the checkpoint
                has no (or a quantized) image encoder, or it does not fit the device.
        """
        with self._lock:
            if self.loaded:
                return
            if self.source is None:
                raise ConfigError("this model was loaded without its image encoder and from no "
                                  "local checkpoint directory: it cannot read images")
            load_vision(self.model, self.source)

    @torch.inference_mode()
    def features(self, inputs: ImageInputs) -> torch.Tensor:
        """(soft tokens, text hidden) features of ``inputs``' images, in prompt order."""
        found = self._features.get(inputs.key)
        if found is not None:
            self._features.move_to_end(inputs.key)
            return found
        self.ensure_loaded()
        encoder = self.model.model.encoder
        device, dtype = self.model.device, self.model.dtype
        with torch.profiler.record_function("dreads.vision"):
            out = encoder.get_image_features(inputs.pixel_values.to(device, dtype),
                                             inputs.position_ids.to(device), return_dict=True)
        features = out.pooler_output
        if features.shape[0] != inputs.tokens:
            raise ValueError(f"the vision tower made {features.shape[0]} image features for "
                             f"{inputs.tokens} soft tokens")
        self._features[inputs.key] = features
        if len(self._features) > self.memo:
            self._features.popitem(last=False)
        return features


def load_vision(model: DiffusionGemmaForBlockDiffusion, source: str) -> int:
    """Read the image encoder (``VISION``) of the checkpoint at ``source`` into ``model``, on
    its device and in its dtype; returns the bytes it takes.

    Raises:
        ConfigError: the checkpoint has no image encoder, a quantized one, or one that does not
            match the model's vision config; or it does not fit the device.
    """
    keys = checkpoint_keys(source)
    vision, text = model.config.vision_config, model.config.text_config
    device, dtype = model.device, model.dtype
    with _default_dtype(dtype), parameters_on_meta():
        modules = {VISION[0]: AutoModel.from_config(vision),
                   VISION[1]: DiffusionGemmaMultimodalEmbedder(vision, text)}  # type: ignore[arg-type]
    taken = 0
    for name, module in modules.items():
        state = _state(keys, f"{name}.", source)
        expected = set(module.state_dict())
        if set(state) != expected:
            raise ConfigError(
                f"the checkpoint at {source!r} does not hold DiffusionGemma's image encoder "
                f"({name}): missing {sorted(expected - set(state))[:5]}, unexpected "
                f"{sorted(set(state) - expected)[:5]}; images cannot be read with it")
        held = module.state_dict()  # parameters in the model's dtype, buffers in their own
        try:
            module.load_state_dict({k: v.to(device, held[k].dtype) for k, v in state.items()},
                                   strict=True, assign=True)
            module.to(device)  # the buffers computed from the config
        except torch.OutOfMemoryError as exc:
            raise ConfigError(f"the image encoder of {source!r} does not fit on {device}: "
                              "lower DREADS_ENGINE_MAX_BATCH or the prompt cache") from exc
        taken += sum(t.nbytes for t in module.state_dict().values())
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, module.eval())
    log.info("loaded the image encoder of %s: %.2f GiB on %s", source, taken / (1 << 30), device)
    return taken


def _state(keys: dict[str, Path], prefix: str, source: str) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under ``prefix``, named without it; refuses quantized ones."""
    names = [k for k in keys if k.startswith(prefix)]
    if not names:
        raise ConfigError(
            f"the checkpoint at {source!r} has no image encoder ({prefix}*): it cannot read "
            "images; use a checkpoint saved with its vision tower")
    if any(k.endswith(("_scale", "_zero_point")) for k in names):
        raise ConfigError(f"the image encoder of {source!r} is quantized, which the engine "
                          "cannot read: quantize the checkpoint with the vision tower ignored "
                          "(llm-compressor's default for DiffusionGemma)")
    state: dict[str, torch.Tensor] = {}
    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(keys[name], []).append(name)
    for file, group in by_file.items():
        with safe_open(str(file), "pt") as handle:
            for name in group:
                state[name.removeprefix(prefix)] = handle.get_tensor(name)
    return state


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
