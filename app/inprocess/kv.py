"""Prompt KV entries and their collation into a batch ``DynamicCache``.

A ``KVEntry`` is one prompt's (or prefix's) encoder cache for a single row, compact (no padding)
and position-independent: its tokens were encoded at positions ``0..length-1``. Layers of one
kind (sliding / full attention) share shapes, so an entry stores one stacked tensor per kind,
(layers, heads, tokens, dim), and collation costs a few copies per row instead of a few per
layer. A question's prompt stores only its own suffix and points at the shared prefix entry.

Collation never writes into an entry: it fills new buffers (or expands views of one entry for
many draws), and transformers' cache update concatenates into new tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

__all__ = ["EMPTY", "KVEntry", "LayerKinds", "layers_of"]


@dataclass(frozen=True, eq=False)
class KVEntry:
    """Per layer kind: (keys, values) of shape (layers, heads, n, dim) for the tokens after
    ``parent`` (all tokens when there is none); sliding kinds keep at most window - 1."""

    length: int  #: prompt tokens encoded (positions 0..length-1)
    kinds: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    parent: KVEntry | None = None

    @property
    def root(self) -> KVEntry:
        """The top of the parent chain (this entry when it has no parent)."""
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    @property
    def nbytes(self) -> int:
        """Bytes of this entry's own tensors (not its parent's)."""
        return sum(k.nbytes + v.nbytes for k, v in self.kinds)


EMPTY = KVEntry(0, ())


class LayerKinds:
    """The model's cache layers grouped by kind, and how many tokens each kind keeps."""

    def __init__(self, text_config: Any) -> None:
        self.text_config = text_config
        template = DynamicCache(config=text_config)
        sliding = [bool(layer.is_sliding) for layer in layers_of(template)]
        self.sliding = sorted(set(sliding))  #: per kind: is it a sliding-window kind
        self.layers = [[i for i, s in enumerate(sliding) if s == kind] for kind in self.sliding]
        #: layer index -> (its kind, its index among the kind's layers)
        self.kind_of = {layer: (kind, j) for kind, ids in enumerate(self.layers)
                        for j, layer in enumerate(ids)}
        self.window: int | None = getattr(text_config, "sliding_window", None)

    def kept(self, kind: int, length: int) -> int:
        """How many of ``length`` tokens a kind keeps (sliding layers keep window - 1)."""
        if self.sliding[kind] and self.window:
            return min(length, self.window - 1)
        return length

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.text_config)

    def collate(self, entries: Sequence[KVEntry]) -> tuple[DynamicCache, int]:
        """A batch cache holding ``entries`` left-padded with zeros to the longest; its length."""
        total = max(e.length for e in entries)
        cache = self.new_cache()
        if total == 0:
            return cache, 0
        for kind, layer_ids in enumerate(self.layers):
            keys, values = self._collate_kind(entries, kind, self.kept(kind, total))
            layers = layers_of(cache)
            for j, idx in enumerate(layer_ids):
                layer = layers[idx]
                layer.lazy_initialization(keys[:, j], values[:, j])
                layer.keys, layer.values = keys[:, j], values[:, j]
                if hasattr(layer, "cumulative_length"):
                    layer.cumulative_length = total
        return cache, total

    def _collate_kind(self, entries: Sequence[KVEntry], kind: int, width: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, layers, heads, width, dim) keys and values of one kind."""
        first = entries[0]
        if all(e is first for e in entries):  # one prompt, many draws: expanded views
            k, v = first.kinds[kind]
            if first.parent is not None:  # one copy of the chain, then views of it
                k, v = _zeros(1, k, width)
                self._place(k, v, 0, first, kind, width)
                k, v = k[0], v[0]
            shape = (len(entries), *k.shape)
            return k.unsqueeze(0).expand(shape), v.unsqueeze(0).expand(shape)
        like = next(e for e in entries if e.length).kinds[kind][0]
        keys, values = _zeros(len(entries), like, width)
        for row, entry in enumerate(entries):
            self._place(keys, values, row, entry, kind, width)
        return keys, values

    def _place(self, keys: torch.Tensor, values: torch.Tensor, row: int, entry: KVEntry,
               kind: int, width: int) -> None:
        """Copy an entry's tokens (its own, then its parents') right-aligned into ``row``."""
        need = self.kept(kind, entry.length)
        end = width
        node: KVEntry | None = entry
        while node is not None and need > 0:
            k, v = node.kinds[kind]
            have = k.shape[2]
            n = min(have, need)
            if n:
                keys[row, :, :, end - n : end] = k[:, :, have - n :]
                values[row, :, :, end - n : end] = v[:, :, have - n :]
            end, need, node = end - n, need - n, node.parent

    def cut(self, cache: DynamicCache, prefixes: Sequence[KVEntry], lengths: Sequence[int],
            total: int, width: int) -> list[KVEntry]:
        """After an encoder call over ``total`` collated prefix tokens and ``width`` new ones:
        each row's new tokens as an entry (own memory) under its prefix."""
        virtual = total + width
        layers = layers_of(cache)
        news = []
        for layer_ids in self.layers:
            held = layers[layer_ids[0]].keys.shape[-2]  # the last `held` of `virtual`
            base = total - (virtual - held)  # where the new tokens start
            news.append((torch.stack([layers[i].keys[:, :, base:] for i in layer_ids], 1),
                         torch.stack([layers[i].values[:, :, base:] for i in layer_ids], 1)))
        entries = []
        for row, (prefix, n) in enumerate(zip(prefixes, lengths, strict=True)):
            kinds = []
            for kind, (k, v) in enumerate(news):
                start = n - self.kept(kind, n)
                kinds.append((k[row, :, :, start:n].clone(), v[row, :, :, start:n].clone()))
            entries.append(KVEntry(prefix.length + n, tuple(kinds),
                                   prefix if prefix.length else None))
        return entries


def layers_of(cache: DynamicCache) -> list[Any]:
    """The cache's layers (DynamicLayer / DynamicSlidingWindowLayer here)."""
    return list(cache.layers)


def _zeros(rows: int, like: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    layers, heads, _, dim = like.shape
    shape = (rows, layers, heads, width, dim)
    return like.new_zeros(shape), like.new_zeros(shape)
