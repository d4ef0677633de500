"""Decoder steps of fixed shape, captured once per shape in a CUDA graph and replayed.

A decoder step launches some 3,000 kernels (30 layers of attention, norms, a dense MLP and the
routed experts); at the batch sizes reads come in, launching them costs more than running them.
Here a batch is padded to a ``Layout`` (groups, slots per group and prompt positions per layer
kind rounded up to a few sizes) and laid out in a ``StaticBatch`` whose key buffers are views of
one arena shared by every layout; the first step of each layout is captured in a CUDA graph
(all layouts share one memory pool), and every later step of that layout refills the buffers
and replays it. Padding rows attend to their own canvas only and are dropped from the output,
so a row reads exactly what it reads in ``PackedBatch`` (the engine's tests check it).

Without CUDA (or with ``capture=False``) the same layouts run eagerly: the tests use that to
check the layout on the CPU.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from app.inprocess.kv import KVEntry, LayerKinds
from app.inprocess.memory import free_bytes
from app.inprocess.packed import Layout, StaticBatch, layout_for

__all__ = ["DEFAULT_KEY_SLOTS", "DecodeGraphs", "slot_bytes"]

log = logging.getLogger("dreads.upstream.transformers")

#: the arena's size in (group, key position) slots: 1.25 x the executor's default decode token
#: budget (65,536), room for its padded layouts; about 18 GiB at full size in bf16
DEFAULT_KEY_SLOTS = 81920
_ARENA_SHARE = 0.35  #: at most this share of the free GPU memory goes to the arena


@dataclass
class _Step:
    batch: StaticBatch
    ids: torch.Tensor  #: (rows, width) canvas ids
    positions: torch.Tensor  #: (rows, width)
    graph: torch.cuda.CUDAGraph | None = None
    out: torch.Tensor | None = None  #: the captured step's last hidden state


def slot_bytes(like: KVEntry) -> int:
    """The arena's bytes per key slot: a key and a value of every layer of every kind."""
    return sum(2 * k[:, :, 0].numel() * k.element_size() for k, _ in like.kinds)


class DecodeGraphs:
    """Decoder steps over ``StaticBatch`` layouts of a model (``decoder``: its decoder stack),
    one CUDA graph per layout when ``capture``."""

    def __init__(self, decoder: Any, kinds: LayerKinds, text_config: Any, *, pad_id: int,
                 capture: bool, key_slots: int = DEFAULT_KEY_SLOTS) -> None:
        self.decoder = decoder
        self.kinds = kinds
        self.text_config = text_config
        self.pad_id = pad_id
        self.capture = capture
        self.key_slots = key_slots
        self.steps: dict[Layout, _Step] = {}
        self.arena: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.pool: Any = None
        self.captured = 0  #: graphs captured so far
        self.capture_s = 0.0  #: seconds spent capturing (warm-up step included)
        self.fallbacks = 0  #: batches that fit no layout or the arena (read eagerly instead)

    def decode(self, entries: Sequence[KVEntry], canvases: Sequence[Sequence[int]]
               ) -> torch.Tensor | None:
        """(rows, width, hidden) last hidden states of the rows' canvases after their entries,
        or None when the batch fits no layout (the caller reads it another way)."""
        width = len(canvases[0])
        layout = layout_for(self.kinds, entries, width)
        if layout is None or not self._fits(layout, entries[0]):
            self.fallbacks += 1
            return None
        step = self.steps.get(layout) or self._new_step(layout)
        placed = step.batch.fill(entries)
        device = step.ids.device
        where = torch.tensor(placed, device=device)
        step.ids.fill_(self.pad_id)
        step.ids[where] = torch.tensor([list(c) for c in canvases], device=device)
        starts = torch.tensor([e.length for e in entries], device=device)
        step.positions[where] = starts[:, None] + torch.arange(width, device=device)[None, :]
        if self.capture and step.graph is None:
            self._capture(step)
        if step.graph is not None:
            step.graph.replay()
            assert step.out is not None
            out = step.out
        else:
            out = self._forward(step)
        return out.index_select(0, where)

    # -- layouts and memory ---------------------------------------------------------------------

    @property
    def arena_bytes(self) -> int:
        """What the arena holds (0 before the first step)."""
        return sum(k.numel() * k.element_size() * 2 for k, _ in self.arena or [])

    def _fits(self, layout: Layout, like: KVEntry) -> bool:
        if self.arena is None:
            self._allocate(like)
        assert self.arena is not None
        return all(layout.groups * layout.key_len(kind) * keys[0].numel() <= keys.numel()
                   for kind, (keys, _) in enumerate(self.arena))

    def _allocate(self, like: KVEntry) -> None:
        """One flat (keys, values) buffer per kind, of ``key_slots`` slots each (fewer when the
        GPU has not the memory), zeroed: stale slots are masked but must be finite."""
        per_slot = slot_bytes(like)
        slots = self.key_slots
        device = like.kinds[0][0].device
        if device.type == "cuda":  # a share of the memory free (under the limit, if any)
            slots = min(slots, int(free_bytes(device) * _ARENA_SHARE) // per_slot)
        self.arena = []
        for k, _ in like.kinds:
            layers, heads, _, dim = k.shape
            shape = (slots, layers, heads, dim)  # reshaped per layout: (groups, L, H, key, D)
            self.arena.append((k.new_zeros(shape), k.new_zeros(shape)))
        log.info("decoder step arena: %d key slots, %.1f GiB", slots, slots * per_slot / 2**30)

    def _new_step(self, layout: Layout) -> _Step:
        assert self.arena is not None
        buffers = []
        for kind, (keys, values) in enumerate(self.arena):
            _, layers, heads, dim = keys.shape
            shape = (layout.groups, layers, heads, layout.key_len(kind), dim)
            n = layout.groups * layout.key_len(kind)
            buffers.append((keys[:n].view(-1).view(shape), values[:n].view(-1).view(shape)))
        device, dtype = self.arena[0][0].device, self.arena[0][0].dtype
        batch = StaticBatch(self.kinds, layout, buffers,
                            query_heads=int(self.text_config.num_attention_heads), dtype=dtype)
        ids = torch.full((layout.rows, layout.width), self.pad_id, dtype=torch.long,
                         device=device)
        positions = torch.arange(layout.width, device=device).repeat(layout.rows, 1)
        step = _Step(batch, ids, positions)
        self.steps[layout] = step
        return step

    # -- the step -------------------------------------------------------------------------------

    def _forward(self, step: _Step) -> torch.Tensor:
        masks: dict[str, torch.Tensor | None] = dict.fromkeys(self.text_config.layer_types)
        n_layers = int(self.text_config.num_hidden_layers)
        with torch.profiler.record_function("dreads.decode_step"):
            out: torch.Tensor = self.decoder(
                decoder_input_ids=step.ids,
                cache=step.batch.empty_cache(n_layers),
                decoder_attention_mask=masks,
                decoder_position_ids=step.positions,
                read_batch=step.batch,
            ).last_hidden_state
        return out

    def _capture(self, step: _Step) -> None:
        """Warm the step up on a side stream (lazy kernel and library set-up), then capture it.
        A step that cannot be captured turns capture off for good (eager from then on)."""
        started = time.perf_counter()
        device = step.ids.device
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            self._forward(step)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                out = self._forward(step)
        except RuntimeError as exc:
            log.warning("decoder step capture failed, steps run eagerly from now on: %s", exc)
            self.capture = False
            torch.cuda.synchronize(device)
            return
        step.graph, step.out = graph, out
        self.captured += 1
        self.capture_s += time.perf_counter() - started
