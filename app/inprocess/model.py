"""DiffusionGemma read forwards with transformers: batched prefill into per-prompt KV entries and
one read-only decoder step over seeded canvases, slot rows only.

A ``KVEntry`` is one prompt's encoder cache for a single row, compact (no padding) and
position-independent: its tokens were encoded at positions ``0..length-1``. Entries from any
number of prefill calls can therefore be collated into one decoder batch (left padding, a
padding mask, per-row canvas positions), and a prefix entry can be extended by a suffix.
Neither the decoder nor an extension ever writes into an entry's tensors: collation builds new
tensors (or expanded views) and transformers' ``DynamicLayer.update`` concatenates.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.attention import sdpa_kernel
from transformers import DiffusionGemmaForBlockDiffusion, DynamicCache
from transformers.modeling_outputs import BaseModelOutputWithPooling

from app.errors import ConfigError
from app.inprocess.compiled import compile_layers
from app.inprocess.fp8 import use_fp8_products
from app.inprocess.fp8_load import (
    drop_vision,
    load_fp8_checkpoint,
    local_checkpoint,
    skeleton,
)
from app.inprocess.graphs import DEFAULT_KEY_SLOTS, DecodeGraphs
from app.inprocess.images import ImageInputs
from app.inprocess.kernels import set_kernels
from app.inprocess.kv import EMPTY, KVEntry, LayerKinds, layers_of
from app.inprocess.memory import (
    GIB,
    limit_memory,
    model_bytes,
    set_memory_limit,
)
from app.inprocess.packed import (
    READ_ATTENTION,
    PackedBatch,
    PackedPrefill,
    register_read_attention,
)
from app.inprocess.quant_format import Fp8Scheme, read_fp8_scheme
from app.inprocess.varlen import FUSED_BACKENDS, VarlenPrefill
from app.inprocess.vision import VisionEncoder

__all__ = [
    "SOFTCAP_DEFAULT",
    "DecodeRow",
    "ImagePrefill",
    "KVEntry",
    "PrefillJob",
    "ReadModel",
    "SlotLogprobs",
    "load_model",
]

SOFTCAP_DEFAULT = 30.0


@dataclass(frozen=True)
class PrefillJob:
    """Encode ``ids`` after ``prefix`` (None: from the start)."""

    prefix: KVEntry | None
    ids: tuple[int, ...]


@dataclass(frozen=True)
class ImagePrefill:
    """Encode ``ids`` from the start with ``images``' features at their image token ids."""

    ids: tuple[int, ...]
    images: ImageInputs


@dataclass(frozen=True)
class DecodeRow:
    """One canvas to read: the prompt entry, the seeded canvas, the slot positions and ids."""

    entry: KVEntry
    canvas: tuple[int, ...]
    slots: tuple[int, ...]
    logprob_ids: tuple[int, ...]
    constrained: bool = False


@dataclass(frozen=True)
class SlotLogprobs:
    """Per slot: the requested ids' log-probs, and the argmax id and its log-prob."""

    logprobs: torch.Tensor  #: (n_slots, n_ids) float32
    argmax_ids: torch.Tensor  #: (n_slots,) int64
    argmax_logprobs: torch.Tensor  #: (n_slots,) float32


def load_model(path: str, *, device: str = "cpu", dtype: str = "bfloat16",
               compiled: bool = False, memory_gib: float | None = None) -> ReadModel:
    """Load a DiffusionGemma checkpoint (local dir or hub id) for reads (``compiled``: see
    ``ReadModel``): unquantized, or FP8 in compressed-tensors' format (``fp8_load.py``; its
    products in FP8 where the device has them, ``fp8.fp8_products``). ``memory_gib``: the
    process's limit on the device (``memory.py``), checked against the weights first.

    Raises:
        ConfigError: no checkpoint there, one quantized in a format the engine cannot read, or
            weights too large for ``memory_gib``.
    """
    local = local_checkpoint(path)
    scheme = read_fp8_scheme(local or path)
    if memory_gib is not None:
        _limit_memory(path, local, scheme, device=device, dtype=dtype, gib=memory_gib)
    if scheme is not None:
        return _load_fp8(local or path, scheme, device=device, dtype=dtype, compiled=compiled)
    options: dict[str, Any] = {"dtype": getattr(torch, dtype)}
    if device != "cpu" and importlib.util.find_spec("accelerate") is not None:
        options["device_map"] = device  # straight onto the GPU, no full copy in CPU memory
    try:
        model = DiffusionGemmaForBlockDiffusion.from_pretrained(path, **options)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot load a DiffusionGemma checkpoint from {path!r}: {exc}. Pass --model as a "
            "directory with config.json and *.safetensors (`dreads engine make-tiny DIR` writes "
            "a tiny one) or a hub id cached locally") from exc
    drop_vision(model)  # text reads never run it; the first image read loads it again
    return ReadModel(model if str(model.device) == device else model.to(device),  # type: ignore[arg-type]
                     compiled=compiled, vision_source=local or local_checkpoint(path))


def _limit_memory(path: str, local: str | None, scheme: Fp8Scheme | None, *, device: str,
                  dtype: str, gib: float) -> None:
    """Refuse weights the limit cannot hold (a local checkpoint: read from its headers), then
    cap the allocator there."""
    limit, where = int(gib * GIB), torch.device(device)
    if local is None:  # a hub id not cached: nothing to count before transformers loads it
        set_memory_limit(where, limit)
        return
    weights = model_bytes(skeleton(local, getattr(torch, dtype), scheme=scheme))
    limit_memory(path, weights, where, limit)


def _load_fp8(path: str, scheme: Fp8Scheme, *, device: str, dtype: str,
              compiled: bool) -> ReadModel:
    try:
        model = load_fp8_checkpoint(path, scheme, device=device, dtype=getattr(torch, dtype))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load the FP8 checkpoint at {path!r}: {exc}") from exc
    mode = use_fp8_products(model, torch.device(device))
    return ReadModel(model, compiled=compiled, vision_source=path,
                     weights=f"{scheme.describe()}; products {mode.describe(model.dtype)}")


class ReadModel:
    """A DiffusionGemma model in eval mode, with the two forwards a read needs.

    ``kernels`` (default): fused RMSNorm, rotary embeddings and leaner grouped experts
    (``kernels.py``).
    ``packed`` (default): the decoder reads through ``PackedBatch`` (one key buffer per state,
    block-diagonal mask, no per-layer cache concatenation or per-head key expansion); False:
    through transformers' own cache path (a collated ``DynamicCache`` and a padding mask, also
    on prefills without a prefix), kept as the reference the packed path is tested against.
    ``graphs`` (default: on a GPU): packed decoder steps padded to a few fixed layouts and
    replayed from CUDA graphs (``graphs.py``); a batch that fits none reads as ``packed``.
    ``compiled`` (default: off): the packed prefill's encoder layers through ``torch.compile``
    (``compiled.py``), compiled on first use.
    ``weights``: how the weights are stored and multiplied, for the fingerprint (default: the
    model's dtype).
    ``vision_source``: the checkpoint directory its image encoder is read from at the first
    read with images, when the model was loaded without it (``vision.py``).

    Packed prefills run the encoder's layers here (``_encode``), not through its forward: the
    last layer's feed-forward and the final norm are skipped, since only the keys and values
    of a prompt are kept.
    """

    def __init__(self, model: DiffusionGemmaForBlockDiffusion, *, packed: bool = True,
                 kernels: bool = True, graphs: bool | None = None,
                 graph_key_slots: int = DEFAULT_KEY_SLOTS, compiled: bool = False,
                 weights: str | None = None, vision_source: str | None = None) -> None:
        register_read_attention()
        if model.config._attn_implementation == "sdpa":
            model.set_attn_implementation(READ_ATTENTION)  # SDPA unless a read batch is passed
        self.model = model.eval()
        #: another attention (eager, say) keeps transformers' collated path
        self.packed = packed and model.config._attn_implementation == READ_ATTENTION
        self._kernels = False
        self.kernels = kernels
        self.config = model.config
        self.text_config = model.config.get_text_config(decoder=True)
        self.vocab_size: int = int(self.text_config.vocab_size)
        self.pad_id: int = int(self.text_config.pad_token_id or 0)
        self.softcap: float = float(self.text_config.final_logit_softcapping or SOFTCAP_DEFAULT)
        self.device = next(model.parameters()).device
        self.kinds = LayerKinds(self.text_config)
        self.graphs = self.device.type == "cuda" if graphs is None else graphs
        self.graph_key_slots = graph_key_slots
        self._steps: DecodeGraphs | None = None
        self.compiled = compiled
        self._layers: list[Any] | None = None  #: made at the first compiled prefill
        self.weights = weights or str(model.dtype).removeprefix("torch.")
        self.image_token_id = int(model.config.image_token_id or -1)  #: -1: no images
        self.vision = VisionEncoder(model, source=vision_source)

    @property
    def kernels(self) -> bool:
        """Fused RMSNorm and the leaner grouped experts (``kernels.py``) installed."""
        return self._kernels

    @kernels.setter
    def kernels(self, on: bool) -> None:
        set_kernels(self.model, on)
        self._kernels = on

    @property
    def steps(self) -> DecodeGraphs:
        """The fixed-layout decoder steps (made on first use), captured in CUDA graphs on a
        GPU."""
        if self._steps is None:
            self._steps = DecodeGraphs(self.model.model.decoder, self.kinds, self.text_config,
                                       pad_id=self.pad_id, capture=self.device.type == "cuda",
                                       key_slots=self.graph_key_slots)
        return self._steps

    def drop_steps(self) -> None:
        """Forget the captured decoder steps: a CUDA graph replays the kernels and the weight
        tensors it was captured with, so after the weights or their products change (quantized
        in place, FP8 products turned off) the steps must be captured again."""
        self._steps = None

    # -- cache plumbing -------------------------------------------------------------------------

    def collate(self, entries: Sequence[KVEntry]) -> tuple[DynamicCache, int]:
        """A batch cache of ``entries`` (left-padded to the longest) and its length."""
        return self.kinds.collate(entries)

    def _padding_mask(self, lengths: Sequence[int], total: int, extra: Sequence[int]
                      ) -> torch.Tensor:
        """(B, total + max(extra)) bool: each row's prefix right-aligned, then its ``extra``."""
        width = total + max(extra)
        mask = torch.zeros((len(lengths), width), dtype=torch.bool)
        for row, (n, m) in enumerate(zip(lengths, extra, strict=True)):
            mask[row, total - n : total + m] = True
        return mask.to(self.device)

    # -- prefill --------------------------------------------------------------------------------

    @torch.inference_mode()
    def prefill(self, jobs: Sequence[PrefillJob]) -> list[KVEntry]:
        """Encode every job's ids after its prefix; one entry per job. Packed: the jobs without
        a prefix end to end in one row (``VarlenPrefill``, no padding), those with one in one
        ``PackedPrefill`` call (a row per shared prefix); collated: everything in one call over
        left-padded prefixes."""
        entries = self._prefill_packed(jobs) if self.packed else self._prefill_collated(jobs)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # so callers can time the call
        return entries

    def _prefill_packed(self, jobs: Sequence[PrefillJob]) -> list[KVEntry]:
        extend = [i for i, j in enumerate(jobs) if j.prefix is not None and j.prefix.length]
        fresh = sorted(set(range(len(jobs))) - set(extend))
        out: list[KVEntry] = [EMPTY] * len(jobs)
        if fresh:
            varlen = VarlenPrefill(self.kinds, [len(jobs[i].ids) for i in fresh])
            self._encode(*varlen.inputs([jobs[i].ids for i in fresh]), varlen)
            for i, entry in zip(fresh, varlen.entries(), strict=True):
                out[i] = entry
        if extend:
            prefixes = [jobs[i].prefix or EMPTY for i in extend]
            suffixes = [jobs[i].ids for i in extend]
            packed = PackedPrefill(self.kinds, prefixes, suffixes,
                                   query_heads=int(self.text_config.num_attention_heads),
                                   device=self.device, dtype=self.model.dtype)
            self._encode(*packed.inputs(suffixes, self.pad_id), packed)
            for i, entry in zip(extend, packed.entries(), strict=True):
                out[i] = entry
        return out

    def _encode(self, ids: torch.Tensor, positions: torch.Tensor,
                batch: VarlenPrefill | PackedPrefill) -> None:
        """The encoder's layers over ``ids`` for the keys and values ``batch`` keeps (it is
        both their cache and their attention); the last layer's feed-forward and the final
        norm are left out, as nothing reads their output."""
        text = self.model.model.encoder.language_model
        *body, last = text.layers[: int(self.text_config.num_hidden_layers)]
        if self.compiled:
            if self._layers is None:
                self._layers = compile_layers(body)
            body = self._layers
        types = self.text_config.layer_types
        positions = positions.to(self.device)
        backends = (sdpa_kernel(list(FUSED_BACKENDS)) if self.device.type == "cuda"
                    else contextlib.nullcontext())
        with torch.profiler.record_function("dreads.prefill"), backends:
            hidden = text.embed_tokens(ids.to(self.device))
            rotary = {kind: text.rotary_emb(hidden, positions, kind) for kind in set(types)}

            def args(i: int) -> dict[str, Any]:
                return dict(position_embeddings=rotary[types[i]], attention_mask=None,
                            position_ids=positions, cache=batch, read_batch=batch)

            for i, layer in enumerate(body):
                hidden = layer(hidden, **args(i))
            last.self_attn(last.input_layernorm(hidden), **args(len(body)))

    def _prefill_collated(self, jobs: Sequence[PrefillJob]) -> list[KVEntry]:
        prefixes = [j.prefix or EMPTY for j in jobs]
        cache, total = self.collate(prefixes) if any(p.length for p in prefixes) else (
            self.kinds.new_cache(), 0)
        for layer in layers_of(cache):
            if layer.is_sliding:
                layer.activate_past_recording()  # keep every token; cut per row below
        lengths = [len(j.ids) for j in jobs]
        width = max(lengths)
        ids = torch.full((len(jobs), width), self.pad_id, dtype=torch.long)
        for row, job in enumerate(jobs):
            ids[row, : len(job.ids)] = torch.tensor(job.ids, dtype=torch.long)
        starts = torch.tensor([p.length for p in prefixes], dtype=torch.long)
        positions = starts[:, None] + torch.arange(width)[None, :]
        mask = self._padding_mask([p.length for p in prefixes], total, lengths).long()
        with torch.profiler.record_function("dreads.prefill"):
            self.model.model.encoder(
                input_ids=ids.to(self.device),
                attention_mask=mask,
                position_ids=positions.to(self.device),
                cache=cache,
            )
        return self.kinds.cut(cache, prefixes, lengths, total, width)

    @torch.inference_mode()
    def prefill_images(self, jobs: Sequence[ImagePrefill]) -> list[KVEntry]:
        """Encode prompts with images, one encoder call each through transformers' own forward:
        the images' features (``vision.py``) replace the embeddings of the image token ids, and
        where the model's ``use_bidirectional_attention`` is ``"vision"`` each image's tokens
        attend to one another both ways (``mm_token_type_ids``), exactly as transformers
        encodes them. Entries are whole prompts: no prefix is shared with a text prompt."""
        entries = [self._prefill_image(job) for job in jobs]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return entries

    def _prefill_image(self, job: ImagePrefill) -> KVEntry:
        features = self.vision.features(job.images)
        ids = torch.tensor([job.ids], dtype=torch.long, device=self.device)
        cache = self.kinds.new_cache()
        for layer in layers_of(cache):
            if layer.is_sliding:
                layer.activate_past_recording()  # keep every token; cut below
        with torch.profiler.record_function("dreads.prefill"):
            self.model.model.encoder(
                input_ids=ids,
                cache=cache,
                mm_token_type_ids=(ids == self.image_token_id).long(),
                mm_encoder_outputs={"image": BaseModelOutputWithPooling(pooler_output=features)},
            )
        return self.kinds.cut(cache, [EMPTY], [len(job.ids)], 0, len(job.ids))[0]

    # -- decode ---------------------------------------------------------------------------------

    @torch.inference_mode()
    def decode(self, rows: Sequence[DecodeRow]) -> list[SlotLogprobs]:
        """One read-only decoder step over every row's canvas (all the same width)."""
        if not self.packed:
            return self.decode_collated(rows)
        if self.graphs:
            hidden = self.steps.decode([r.entry for r in rows], [r.canvas for r in rows])
            if hidden is not None:
                with torch.profiler.record_function("dreads.decode"):
                    return self._logprobs(rows, hidden)
        width = len(rows[0].canvas)
        batch = PackedBatch(self.kinds, [r.entry for r in rows], width,
                            query_heads=int(self.text_config.num_attention_heads),
                            device=self.device, dtype=self.model.dtype)
        canvas = torch.tensor([r.canvas for r in rows], dtype=torch.long, device=self.device)
        positions = (torch.tensor([r.entry.length for r in rows])[:, None]
                     + torch.arange(width)[None, :]).to(self.device)
        masks: dict[str, torch.Tensor | None] = dict.fromkeys(self.text_config.layer_types)
        with torch.profiler.record_function("dreads.decode"):
            return self._logprobs(rows, self.model.model.decoder(
                decoder_input_ids=canvas,
                cache=batch.empty_cache(int(self.text_config.num_hidden_layers)),
                decoder_attention_mask=masks,
                decoder_position_ids=positions,
                read_batch=batch,
            ).last_hidden_state)

    @torch.inference_mode()
    def decode_collated(self, rows: Sequence[DecodeRow]) -> list[SlotLogprobs]:
        """The same step through transformers' cache path (the reference)."""
        cache, total = self.collate([r.entry for r in rows])
        lengths = [r.entry.length for r in rows]
        width = len(rows[0].canvas)
        canvas = torch.tensor([r.canvas for r in rows], dtype=torch.long, device=self.device)
        mask = positions = None
        if any(n != total for n in lengths):  # mixed lengths: mask the padding, place each row
            mask = self._padding_mask(lengths, total, [width] * len(rows))
            positions = (torch.tensor(lengths)[:, None] + torch.arange(width)[None, :]).to(
                self.device)
        hidden = self.model.model(
            cache=cache,
            decoder_input_ids=canvas,
            decoder_attention_mask=mask,
            decoder_position_ids=positions,
        ).last_hidden_state
        return self._logprobs(rows, hidden)

    def _logprobs(self, rows: Sequence[DecodeRow], hidden: torch.Tensor) -> list[SlotLogprobs]:
        row_idx = torch.tensor([i for i, r in enumerate(rows) for _ in r.slots], device=self.device)
        slot_idx = torch.tensor([s for r in rows for s in r.slots], device=self.device)
        logits = self.slot_logits(hidden[row_idx, slot_idx])
        return self._split(rows, logits)

    def slot_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Softcapped float32 logits over the full vocabulary for (N, hidden) slot states."""
        logits = self.model.lm_head(hidden).float()
        return torch.tanh(logits / self.softcap) * self.softcap

    def _split(self, rows: Sequence[DecodeRow], logits: torch.Tensor) -> list[SlotLogprobs]:
        """Per row: the requested ids' log-probs and the argmax, in a few batched kernels."""
        wanted = [(r.logprob_ids, r.constrained) for r in rows for _ in r.slots]
        picked = _pick(logits, wanted)
        out: list[SlotLogprobs] = []
        at = 0
        for row in rows:
            n, k = len(row.slots), len(row.logprob_ids)
            part = slice(at, at + n)
            at += n
            out.append(SlotLogprobs(picked.logprobs[part, :k], picked.argmax_ids[part],
                                    picked.argmax_logprobs[part]))
        return out


def _pick(logits: torch.Tensor, wanted: Sequence[tuple[Sequence[int], bool]]) -> SlotLogprobs:
    """For (N, vocab) logits: each row's ids' log-probs (full-vocabulary log-softmax, or
    renormalised over its ids when constrained) and its argmax, padded to the most ids."""
    width = max(len(ids) for ids, _ in wanted)
    if width == 0:  # no ids asked for: only the argmax rows
        best, arg = torch.log_softmax(logits, dim=-1).max(dim=-1)
        return SlotLogprobs(logits.new_zeros((len(wanted), 0)).cpu(), arg.cpu(), best.cpu())
    index = torch.zeros((len(wanted), width), dtype=torch.long)
    valid = torch.zeros((len(wanted), width), dtype=torch.bool)
    for i, (ids, _) in enumerate(wanted):
        index[i, : len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        valid[i, : len(ids)] = True
    constrained = torch.tensor([c for _, c in wanted], dtype=torch.bool)
    index, valid = index.to(logits.device), valid.to(logits.device)
    full = torch.log_softmax(logits, dim=-1)
    best, arg = full.max(dim=-1)
    sub = torch.log_softmax(logits.gather(1, index).masked_fill(~valid, -torch.inf), dim=-1)
    sub_best, sub_arg = sub.max(dim=-1)
    mask = constrained.to(logits.device)
    return SlotLogprobs(
        torch.where(mask[:, None], sub, full.gather(1, index)).cpu(),
        torch.where(mask, index.gather(1, sub_arg[:, None])[:, 0], arg).cpu(),
        torch.where(mask, sub_best, best).cpu(),
    )
