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

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DiffusionGemmaForBlockDiffusion, DynamicCache

from app.errors import ConfigError

__all__ = [
    "SOFTCAP_DEFAULT",
    "DecodeRow",
    "KVEntry",
    "PrefillJob",
    "ReadModel",
    "SlotLogprobs",
    "load_model",
]

SOFTCAP_DEFAULT = 30.0


@dataclass(frozen=True, eq=False)
class KVEntry:
    """One prompt's (or prefix's) encoder cache for a single row.

    ``layers`` hold, per layer, (keys, values) of shape (heads, n, dim) for the tokens after
    ``parent`` (all tokens when there is none): a question's prompt keeps only its own suffix
    and refers to the shared document prefix. Sliding layers keep at most window - 1 tokens.
    """

    length: int  #: prompt tokens encoded (positions 0..length-1)
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    parent: KVEntry | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of this entry's own tensors (not its parent's)."""
        return sum(k.nbytes + v.nbytes for k, v in self.layers)


@dataclass(frozen=True)
class PrefillJob:
    """Encode ``ids`` after ``prefix`` (None: from the start)."""

    prefix: KVEntry | None
    ids: tuple[int, ...]


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


def load_model(path: str, *, device: str = "cpu", dtype: str = "bfloat16") -> ReadModel:
    """Load a DiffusionGemma checkpoint (local dir or hub id) for reads."""
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
    return ReadModel(model.to(device))


class ReadModel:
    """A DiffusionGemma model in eval mode, with the two forwards a read needs."""

    def __init__(self, model: DiffusionGemmaForBlockDiffusion) -> None:
        self.model = model.eval()
        self.config = model.config
        self.text_config = model.config.get_text_config(decoder=True)
        self.vocab_size: int = int(self.text_config.vocab_size)
        self.pad_id: int = int(self.text_config.pad_token_id or 0)
        self.softcap: float = float(self.text_config.final_logit_softcapping or SOFTCAP_DEFAULT)
        self.device = next(model.parameters()).device
        self._template = DynamicCache(config=self.text_config)
        self.sliding_window: int | None = getattr(self.text_config, "sliding_window", None)

    # -- cache plumbing -------------------------------------------------------------------------

    def _new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.text_config)

    def _is_sliding(self, layer_idx: int) -> bool:
        return bool(self._template.layers[layer_idx].is_sliding)

    def _kept(self, layer_idx: int, length: int) -> int:
        """How many of ``length`` tokens a layer keeps (sliding layers keep window - 1)."""
        if self._is_sliding(layer_idx) and self.sliding_window:
            return min(length, self.sliding_window - 1)
        return length

    def collate(self, entries: Sequence[KVEntry]) -> tuple[DynamicCache, int]:
        """A batch cache holding ``entries`` left-padded with zeros to the longest; its length."""
        total = max(e.length for e in entries)
        cache = self._new_cache()
        if total == 0:
            return cache, 0
        for idx, layer in enumerate(cache.layers):
            keys, values = self._collate_layer(entries, idx, self._kept(idx, total))
            layer.lazy_initialization(keys, values)
            layer.keys, layer.values = keys, values
            if hasattr(layer, "cumulative_length"):
                layer.cumulative_length = total
        return cache, total

    def _collate_layer(
        self, entries: Sequence[KVEntry], idx: int, width: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        first = entries[0]
        if all(e is first for e in entries):  # one prompt, many draws: expanded views
            k, v = first.layers[idx]
            if first.parent is not None:  # one copy of the chain, then views of it
                k, v = self._zeros(1, k, width)
                self._place(k, v, 0, first, idx, width)
                k, v = k[0], v[0]
            shape = (len(entries), *k.shape)
            return k.unsqueeze(0).expand(shape), v.unsqueeze(0).expand(shape)
        like = next(e for e in entries if e.length).layers[idx][0]
        keys, values = self._zeros(len(entries), like, width)
        for row, entry in enumerate(entries):
            self._place(keys, values, row, entry, idx, width)
        return keys, values

    @staticmethod
    def _zeros(rows: int, like: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        heads, _, dim = like.shape
        return like.new_zeros((rows, heads, width, dim)), like.new_zeros((rows, heads, width, dim))

    def _place(self, keys: torch.Tensor, values: torch.Tensor, row: int, entry: KVEntry,
               idx: int, width: int) -> None:
        """Copy an entry's tokens (its own, then its parents') right-aligned into row ``row``."""
        need = self._kept(idx, entry.length)
        end = width
        node: KVEntry | None = entry
        while node is not None and need > 0:
            k, v = node.layers[idx]
            n = min(k.shape[1], need)
            if n:
                keys[row, :, end - n : end] = k[:, k.shape[1] - n :]
                values[row, :, end - n : end] = v[:, v.shape[1] - n :]
            end, need, node = end - n, need - n, node.parent

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
        """Encode every job's ids after its prefix in ONE encoder call; one entry per job."""
        empty = KVEntry(0, ())
        prefixes = [j.prefix or empty for j in jobs]
        cache, total = self.collate(prefixes) if any(p.length for p in prefixes) else (
            self._new_cache(), 0)
        for layer in cache.layers:
            if layer.is_sliding:
                layer.activate_past_recording()  # keep every token; we cut per row below
        lengths = [len(j.ids) for j in jobs]
        width = max(lengths)
        ids = torch.full((len(jobs), width), self.pad_id, dtype=torch.long)
        for row, job in enumerate(jobs):
            ids[row, : len(job.ids)] = torch.tensor(job.ids, dtype=torch.long)
        starts = torch.tensor([p.length for p in prefixes], dtype=torch.long)
        positions = starts[:, None] + torch.arange(width)[None, :]
        mask = self._padding_mask([p.length for p in prefixes], total, lengths)
        self.model.model.encoder(
            input_ids=ids.to(self.device),
            attention_mask=mask.long(),
            position_ids=positions.to(self.device),
            cache=cache,
        )
        entries = [
            self._cut_row(cache, row, total + width, total, p, n)
            for row, (p, n) in enumerate(zip(prefixes, lengths, strict=True))
        ]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # so callers can time the call
        return entries

    def _cut_row(
        self, cache: DynamicCache, row: int, virtual: int, total: int, prefix: KVEntry, n: int
    ) -> KVEntry:
        """Row ``row``'s new tokens of an extended cache as an entry (own memory) under
        ``prefix``.

        Each layer holds the last ``held`` of the virtual sequence ``total + width``; the row's
        new tokens are ``[total, total + n)`` of it.
        """
        layers = []
        for idx, layer in enumerate(cache.layers):
            keys, values = layer.keys, layer.values
            offset = virtual - keys.shape[-2]
            end = total + n - offset
            start = max(end - self._kept(idx, n), 0)
            layers.append((keys[row, :, start:end].clone(), values[row, :, start:end].clone()))
        return KVEntry(prefix.length + n, tuple(layers), prefix if prefix.length else None)

    # -- decode ---------------------------------------------------------------------------------

    @torch.inference_mode()
    def decode(self, rows: Sequence[DecodeRow]) -> list[SlotLogprobs]:
        """One read-only decoder step over every row's canvas (all the same width)."""
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
