"""A memory limit for the in-process engine (``DREADS_ENGINE_GPU_MEMORY``, GiB): to run on a
consumer card, or beside other processes on a large one.

* At load, the weights' size on the device is counted on the model built with its parameters on
  the meta device (``fp8_load.skeleton``; no tensor is read): FP8 tensors take a byte an
  element, their scales float32, everything else the model's dtype, and weights the encoder
  and decoder share count once. A checkpoint whose weights leave less than ``WORKING_MIN``
  under the limit is refused before anything is loaded, with the figures.
* On a GPU, torch's allocator is capped at the limit (``set_per_process_memory_fraction``), so
  the process never takes more: a batch that would is an out-of-memory error the engine
  answers as such.
* The prompt cache (30%) and the decoder step arena (35%) are shares of ``free_bytes``: the
  memory free on the card, and under the limit, whichever is less.
"""

from __future__ import annotations

import torch

from app.errors import ConfigError

__all__ = ["GIB", "WORKING_MIN", "check_weights_fit", "free_bytes", "limit_memory", "model_bytes",
           "room", "set_memory_limit"]

GIB = 1 << 30
#: the least the limit must leave beside the weights: a prefill's activations at full size (16k
#: tokens through the experts), a small prompt cache and step arena
WORKING_MIN = 2 * GIB
_LIMITS: dict[int, int] = {}  #: GPU index -> this process's limit in bytes


def model_bytes(model: torch.nn.Module) -> int:
    """What ``model`` (a ``fp8_load.skeleton``: parameters on the meta device, in the dtypes
    they are loaded in) takes once loaded: each shared parameter once, and its persistent
    buffers."""
    unique = {id(p): p for p in model.parameters()}
    persistent = set(model.state_dict(keep_vars=True))
    buffers = [b for name, b in model.named_buffers() if name in persistent]
    return sum(t.numel() * t.element_size() for t in [*unique.values(), *buffers])


def check_weights_fit(path: str, weights: int, limit: int) -> None:
    """Refuse a checkpoint whose ``weights`` (bytes) leave less than ``WORKING_MIN`` under
    ``limit`` (bytes).

    Raises:
        ConfigError: the figures, and what to do.
    """
    if weights + WORKING_MIN <= limit:
        return
    where = (f"more than the memory limit of {limit / GIB:.2f} GiB" if weights > limit else
             f"leaving {(limit - weights) / GIB:.2f} GiB of the memory limit of "
             f"{limit / GIB:.2f} GiB")
    raise ConfigError(
        f"the weights of {path!r} take {weights / GIB:.2f} GiB on the device, {where}; reads "
        f"need at least {WORKING_MIN / GIB:.0f} GiB beside them (activations, prompt cache, "
        "step arena). Raise DREADS_ENGINE_GPU_MEMORY, or use a smaller checkpoint (FP8 weights "
        "take half of bf16's)")


def limit_memory(what: str, weights: int, device: torch.device, limit: int) -> None:
    """Refuse ``weights`` (bytes) that ``limit`` cannot hold beside reads
    (``check_weights_fit``), then cap the allocator on ``device`` there."""
    check_weights_fit(what, weights, limit)
    set_memory_limit(device, limit)


def set_memory_limit(device: torch.device, limit: int) -> None:
    """Cap torch's allocator on the GPU ``device`` at ``limit`` bytes (no-op elsewhere)."""
    if device.type != "cuda":
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    total = torch.cuda.get_device_properties(index).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), index)
    _LIMITS[index] = limit


def room(free: int, reserved: int, allocated: int, limit: int | None) -> int:
    """Bytes this process may still take: the card's ``free`` memory plus what the allocator
    holds unused (``reserved - allocated``), and no more than ``limit - allocated``."""
    available = free + reserved - allocated
    if limit is not None:
        available = min(available, limit - allocated)
    return max(0, available)


def free_bytes(device: torch.device) -> int:
    """``room`` on the GPU ``device`` now."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    free, _ = torch.cuda.mem_get_info(index)
    return room(free, torch.cuda.memory_reserved(index), torch.cuda.memory_allocated(index),
                _LIMITS.get(index))
