"""Packed decoder reads: one attention call per layer over per-state key buffers.

A decoder batch is split into *groups*: the rows whose prompt entries share one root entry
(a state's document prefix, or the prompt itself when it has no parent). Each group gets one
key/value buffer per layer kind, laid out as

    [root tokens | each distinct entry's own tokens (its question suffix) | each row's canvas]

and one additive mask: a row attends to the root tokens its prompt keeps, to its own entry's
tokens and to its own canvas, nothing else. So the draws of one prompt and the isolated
questions of one state read the shared prompt once, as a joint read does, while every canvas
sees exactly what it sees when read alone (the block-diagonal mask of a packed forward).

Grouped-query heads are folded into the query axis (queries of the heads that share a key/value
head attend together), so keys are never expanded per query head, and the canvas keys are
written into their slot of the buffer: no per-layer concatenation of the cache.

The attention function is registered with transformers under ``READ_ATTENTION``; it handles a
layer call only when the decoder is given ``read_batch=`` (a ``PackedBatch``) and otherwise
defers to transformers' SDPA attention unchanged (the encoder, other callers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from app.inprocess.kv import KVEntry, LayerKinds

__all__ = [
    "READ_ATTENTION",
    "Layout",
    "PackedBatch",
    "StaticBatch",
    "group_rows",
    "layout_for",
    "read_attention",
    "register_read_attention",
]

READ_ATTENTION = "dreads_read"
_ALIGN = 16  #: key length multiple (the memory-efficient kernel wants aligned bias rows)


def read_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, **kwargs: Any
                   ) -> tuple[torch.Tensor, None]:
    """transformers' attention-interface signature: packed decoder attention when the call
    carries ``read_batch``, transformers' SDPA attention otherwise."""
    batch = kwargs.pop("read_batch", None)
    if batch is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    return batch.attend(module, query, key, value), None


def register_read_attention() -> None:
    """Make ``READ_ATTENTION`` a valid ``attn_implementation`` (idempotent); its masks are
    SDPA's, so a model switched to it encodes exactly as with ``sdpa``."""
    if READ_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(READ_ATTENTION, read_attention)
    if READ_ATTENTION not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        ALL_MASK_ATTENTION_FUNCTIONS.register(READ_ATTENTION, sdpa_mask)


@dataclass(frozen=True)
class _Kind:
    """One layer kind's buffers for a batch."""

    keys: torch.Tensor  #: (groups, layers, kv_heads, key_len, dim)
    values: torch.Tensor
    bias: torch.Tensor  #: (groups, 1, q_per_kv * rows_max * width, key_len), 0 or -inf
    canvas_at: torch.Tensor  #: (rows, width) key position of each canvas token in its group


class _EmptyLayer:
    """What the decoder's ``append_to_cache`` reads: no cached tokens (the prompt is in the
    packed buffers), so it returns the canvas keys and values as they are."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys = keys
        self.values = values


class EmptyCache:
    """A read-only stand-in for the decoder's ``cache`` argument."""

    is_compileable = False

    def __init__(self, layers: list[_EmptyLayer]) -> None:
        self.layers = layers


@dataclass(frozen=True)
class _Plan:
    """Where one group's prompt tokens go in a kind's key buffer: the root's kept tokens at
    [0, root_n), each distinct entry's own tokens at ``own[id(entry)]`` = (start, n), up to
    ``end``."""

    root_n: int
    own: dict[int, tuple[int, int]]
    end: int


def _plan_kind(kinds: LayerKinds, kind: int, entries: Sequence[KVEntry],
               groups: Sequence[Sequence[int]], roots: Sequence[KVEntry]) -> list[_Plan]:
    plans = []
    for g, rows in enumerate(groups):
        root = roots[g]
        at = root_n = root.kinds[kind][0].shape[2]
        own: dict[int, tuple[int, int]] = {}
        for row in rows:
            entry = entries[row]
            if id(entry) not in own:
                n = min(entry.length - root.length, kinds.kept(kind, entry.length))
                own[id(entry)] = (at, n)
                at += n
        plans.append(_Plan(root_n, own, at))
    return plans


def group_rows(entries: Sequence[KVEntry]) -> tuple[list[list[int]], list[KVEntry]]:
    """The rows of each root entry (in order of first appearance), and the roots."""
    roots: dict[int, KVEntry] = {}
    members: dict[int, list[int]] = {}
    for row, entry in enumerate(entries):
        root = entry.root
        roots.setdefault(id(root), root)
        members.setdefault(id(root), []).append(row)
    return list(members.values()), list(roots.values())


def _fill_group(kinds: LayerKinds, kind: int, plan: _Plan, root: KVEntry,
                rows: Sequence[int], entries: Sequence[KVEntry], keys: torch.Tensor,
                values: torch.Tensor, allowed: torch.Tensor, canvas: Sequence[int],
                width: int) -> None:
    """Copy a group's prompt tokens into its (layers, heads, key_len, dim) buffers and mark, per
    slot (its rows in order), the keys it attends to: its prompt's root and own tokens and its
    canvas at ``canvas[slot]``."""
    rk, rv = root.kinds[kind]
    keys[:, :, : plan.root_n] = rk
    values[:, :, : plan.root_n] = rv
    copied: set[int] = set()
    for slot, row in enumerate(rows):
        entry = entries[row]
        start, n = plan.own[id(entry)]
        if id(entry) not in copied:
            copied.add(id(entry))
            _place_own(keys, values, entry, root, kind, start, n)
        keep_root = kinds.kept(kind, entry.length) - n
        allowed[slot, plan.root_n - keep_root : plan.root_n] = True
        allowed[slot, start : start + n] = True
        allowed[slot, canvas[slot] : canvas[slot] + width] = True


class _PackedRead:
    """What the decoder's attention needs of a packed batch (``PackedBatch``, ``StaticBatch``):
    per kind the key buffers, the additive mask and the canvas key positions; ``flat`` maps each
    decoder row to its (group, slot) query block (None: row r is block r)."""

    width: int
    rows: int
    n_groups: int
    rows_max: int
    query_heads: int
    flat: torch.Tensor | None
    group_index: torch.Tensor
    kind_of: dict[int, tuple[int, int]]
    kinds: list[_Kind]

    def empty_cache(self, n_layers: int) -> EmptyCache:
        """The decoder's ``cache``: per layer, zero-length keys of the layer's shape."""
        layers = []
        for layer in range(n_layers):
            kind, _ = self.kind_of[layer]
            buf = self.kinds[kind].keys
            empty = buf.new_empty((self.rows, buf.shape[2], 0, buf.shape[4]))
            layers.append(_EmptyLayer(empty, empty))
        return EmptyCache(layers)

    def attend(self, module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
               ) -> torch.Tensor:
        """Attention of one decoder layer. ``query`` (rows, heads, width, dim); ``key`` and
        ``value`` (rows, kv_heads, width, dim): the canvas only. Returns (rows, width, heads,
        dim), as transformers' attention functions do."""
        kind_id, j = self.kind_of[module.layer_idx]
        kind = self.kinds[kind_id]
        keys, values = kind.keys[:, j], kind.values[:, j]  # (groups, kv_heads, key_len, dim)
        where = self.group_index[:, None].expand(-1, self.width)
        keys[where, :, kind.canvas_at] = key.transpose(1, 2).to(keys.dtype)
        values[where, :, kind.canvas_at] = value.transpose(1, 2).to(values.dtype)
        rows, heads, width, dim = query.shape
        kv_heads = keys.shape[1]
        q_per_kv = heads // kv_heads
        groups = self.n_groups
        blocks = query.view(rows, kv_heads, q_per_kv, width, dim)
        if self.flat is not None:
            blocks = query.new_zeros((groups * self.rows_max, kv_heads, q_per_kv, width, dim))
            blocks.index_copy_(0, self.flat, query.view(rows, kv_heads, q_per_kv, width, dim))
        folded = blocks.view(groups, self.rows_max, kv_heads, q_per_kv, width, dim).permute(
            0, 2, 3, 1, 4, 5).reshape(groups, kv_heads, -1, dim)
        out = torch.nn.functional.scaled_dot_product_attention(
            folded, keys, values, attn_mask=kind.bias, scale=module.scaling)
        out = out.reshape(groups, kv_heads, q_per_kv, self.rows_max, width, dim).permute(
            0, 3, 4, 1, 2, 5).reshape(groups * self.rows_max, width, heads, dim)
        return out if self.flat is None else out.index_select(0, self.flat)


class PackedBatch(_PackedRead):
    """One decoder call's packed key buffers, masks and index tensors (see the module doc)."""

    def __init__(self, kinds: LayerKinds, entries: Sequence[KVEntry], width: int, *,
                 query_heads: int, device: torch.device, dtype: torch.dtype) -> None:
        self.width = width
        self.rows = len(entries)
        self.query_heads = query_heads
        self.groups, group_roots = group_rows(entries)
        self.n_groups = len(self.groups)
        self.rows_max = max(len(m) for m in self.groups)
        group_of = [0] * self.rows
        slot_of = [0] * self.rows
        for g, rows in enumerate(self.groups):
            for slot, row in enumerate(rows):
                group_of[row], slot_of[row] = g, slot
        flat = [g * self.rows_max + s for g, s in zip(group_of, slot_of, strict=True)]
        self.flat = torch.tensor(flat, dtype=torch.long, device=device)
        self.group_index = torch.tensor(group_of, dtype=torch.long, device=device)
        self.kind_of = kinds.kind_of
        self.kinds = [
            self._build_kind(kinds, kind, entries, group_roots, device, dtype)
            for kind in range(len(kinds.layers))
        ]

    def _build_kind(self, kinds: LayerKinds, kind: int, entries: Sequence[KVEntry],
                    roots: list[KVEntry], device: torch.device, dtype: torch.dtype) -> _Kind:
        width = self.width
        like = roots[0].kinds[kind][0]
        layers, heads, _, dim = like.shape
        plans = _plan_kind(kinds, kind, entries, self.groups, roots)
        # each group's canvases follow its prompt tokens, one per row
        canvases = [[p.end + slot * width for slot in range(len(rows))]
                    for p, rows in zip(plans, self.groups, strict=True)]
        key_len = -(-max(p.end + len(rows) * width for p, rows in zip(
            plans, self.groups, strict=True)) // _ALIGN) * _ALIGN
        shape = (len(self.groups), layers, heads, key_len, dim)
        keys = like.new_zeros(shape)
        values = like.new_zeros(shape)
        allowed = torch.zeros((len(self.groups), self.rows_max, key_len), dtype=torch.bool)
        canvas_at = torch.zeros((self.rows, width), dtype=torch.long)
        for g, plan in enumerate(plans):
            rows = self.groups[g]
            _fill_group(kinds, kind, plan, roots[g], rows, entries, keys[g], values[g],
                        allowed[g], canvases[g], width)
            for slot, row in enumerate(rows):
                canvas_at[row] = torch.arange(canvases[g][slot], canvases[g][slot] + width)
            allowed[g, len(rows) :, :] = True  # padding queries: attend anywhere (discarded)
        q_per_kv = self.query_heads // heads
        full = allowed.to(device)[:, None, None, :, None, :].expand(
            len(self.groups), 1, q_per_kv, self.rows_max, width, key_len)
        bias = torch.zeros(full.shape, dtype=dtype, device=device).masked_fill_(
            ~full, float("-inf")).reshape(len(self.groups), 1, -1, key_len)
        return _Kind(keys, values, bias, canvas_at.to(device))


# -- fixed shapes (CUDA graphs) -----------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """The fixed shape of a ``StaticBatch``: ``groups`` x ``slots`` decoder rows (row r is slot
    r % slots of group r // slots); per kind a key buffer of ``prefix[kind]`` prompt positions,
    then one canvas of ``width`` per slot."""

    groups: int
    slots: int
    width: int
    prefix: tuple[int, ...]

    @property
    def rows(self) -> int:
        return self.groups * self.slots

    def key_len(self, kind: int) -> int:
        return -(-(self.prefix[kind] + self.slots * self.width) // _ALIGN) * _ALIGN

    def key_slots(self) -> int:
        """The (group, key position) pairs of the largest kind: what it takes of an arena."""
        return self.groups * max(self.key_len(k) for k in range(len(self.prefix)))


#: group and slot counts a batch is padded up to
GROUP_SIZES = (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 96, 128, 160, 192, 224, 256)
SLOT_SIZES = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)
PREFIX_STEP = 256  #: prompt positions per kind are padded up to a multiple of this


def _round_up(n: int, sizes: Sequence[int]) -> int | None:
    return next((s for s in sizes if s >= n), None)


def layout_for(kinds: LayerKinds, entries: Sequence[KVEntry], width: int) -> Layout | None:
    """The padded layout a batch fits (None: more groups or slots than the sizes above)."""
    groups, roots = group_rows(entries)
    n_groups = _round_up(len(groups), GROUP_SIZES)
    slots = _round_up(max(len(m) for m in groups), SLOT_SIZES)
    if n_groups is None or slots is None:
        return None
    prefix = tuple(
        -(-max(p.end for p in _plan_kind(kinds, kind, entries, groups, roots)) // PREFIX_STEP)
        * PREFIX_STEP
        for kind in range(len(kinds.layers)))
    return Layout(n_groups, slots, width, prefix)


class StaticBatch(_PackedRead):
    """A packed batch of fixed shape in fixed memory, refilled for each call: the inputs a
    captured decoder step reads. Padding rows (free slots, padding groups) attend to their own
    canvas only; their outputs are discarded."""

    def __init__(self, kinds: LayerKinds, layout: Layout,
                 buffers: Sequence[tuple[torch.Tensor, torch.Tensor]], *, query_heads: int,
                 dtype: torch.dtype) -> None:
        """``buffers``: per kind (keys, values) of shape (groups, layers, kv_heads, key_len,
        dim), e.g. views of an arena shared by every layout."""
        self.layer_kinds = kinds
        self.layout = layout
        self.width = layout.width
        self.rows = layout.rows
        self.n_groups = layout.groups
        self.rows_max = layout.slots
        self.query_heads = query_heads
        self.flat = None
        device = buffers[0][0].device
        row = torch.arange(layout.rows, device=device)
        self.group_index = row // layout.slots
        self.kind_of = kinds.kind_of
        self.kinds = []
        for kind, (keys, values) in enumerate(buffers):
            key_len = layout.key_len(kind)
            assert keys.shape[0] == layout.groups and keys.shape[3] == key_len
            q_per_kv = query_heads // keys.shape[2]
            bias = torch.zeros((layout.groups, 1, q_per_kv * layout.slots * layout.width,
                                key_len), dtype=dtype, device=device)
            start = layout.prefix[kind] + (row % layout.slots) * layout.width
            canvas_at = start[:, None] + torch.arange(layout.width, device=device)[None, :]
            self.kinds.append(_Kind(keys, values, bias, canvas_at))

    def fill(self, entries: Sequence[KVEntry]) -> list[int]:
        """Write a batch's prompt tokens and masks into the buffers; each entry's decoder row."""
        layout, width = self.layout, self.width
        groups, roots = group_rows(entries)
        placed = [0] * len(entries)
        for g, rows in enumerate(groups):
            for slot, row in enumerate(rows):
                placed[row] = g * layout.slots + slot
        for kind_id, kind in enumerate(self.kinds):
            canvas = [layout.prefix[kind_id] + slot * width for slot in range(layout.slots)]
            key_len = layout.key_len(kind_id)
            allowed = torch.zeros((layout.groups, layout.slots, key_len), dtype=torch.bool)
            for slot in range(layout.slots):  # every slot sees its own canvas at least
                allowed[:, slot, canvas[slot] : canvas[slot] + width] = True
            plans = _plan_kind(self.layer_kinds, kind_id, entries, groups, roots)
            for g, (plan, rows) in enumerate(zip(plans, groups, strict=True)):
                _fill_group(self.layer_kinds, kind_id, plan, roots[g], rows, entries,
                            kind.keys[g], kind.values[g], allowed[g], canvas, width)
            q_per_kv = kind.bias.shape[2] // (layout.slots * width)
            view = kind.bias.view(layout.groups, 1, q_per_kv, layout.slots, width, key_len)
            mask = allowed.to(kind.bias.device)[:, None, None, :, None, :]
            view.copy_(torch.where(mask, 0.0, float("-inf")).to(kind.bias.dtype))
        return placed


def _place_own(keys: torch.Tensor, values: torch.Tensor, entry: KVEntry, root: KVEntry,
               kind: int, start: int, n: int) -> None:
    """Copy the last ``n`` tokens of ``entry``'s chain below ``root`` into [start, start+n)
    of one group's (layers, heads, key_len, dim) buffers."""
    end = start + n
    need = n
    node: KVEntry | None = entry
    while node is not None and node is not root and need > 0:
        k, v = node.kinds[kind]
        have = k.shape[2]
        take = min(have, need)
        if take:
            keys[:, :, end - take : end] = k[:, :, have - take :]
            values[:, :, end - take : end] = v[:, :, have - take :]
        end, need, node = end - take, need - take, node.parent


class PackedPrefill:
    """One encoder call that extends each shared prefix by all of its suffixes at once.

    Per prefix (a *group*), one row: ``[suffix 1 | suffix 2 | ...]``, each suffix at the
    positions right after the prefix; its keys are ``[prefix tokens kept | the row's new
    tokens]``, and a suffix token attends to the prefix (within the sliding window on sliding
    layers) and causally to its own suffix only: what it sees when its prompt is encoded alone.
    The object is both the encoder's ``cache`` (``update`` writes a layer's new keys into the
    row's buffer and returns the buffer) and its ``read_batch`` (``attend``).
    """

    is_compileable = False

    def __init__(self, kinds: LayerKinds, prefixes: Sequence[KVEntry],
                 suffixes: Sequence[Sequence[int]], *, query_heads: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        self.layer_kinds = kinds
        self.query_heads = query_heads
        order: dict[int, int] = {}
        self.groups: list[list[int]] = []
        for job, prefix in enumerate(prefixes):
            if id(prefix) not in order:
                order[id(prefix)] = len(self.groups)
                self.groups.append([])
            self.groups[order[id(prefix)]].append(job)
        self.prefixes = [prefixes[g[0]] for g in self.groups]
        self.lengths = [len(s) for s in suffixes]
        self.offset = [0] * len(suffixes)  #: where each suffix starts in its row
        widths = []
        for group in self.groups:
            at = 0
            for job in group:
                self.offset[job] = at
                at += self.lengths[job]
            widths.append(at)
        self.width = max(widths)
        self.group_of = {job: g for g, group in enumerate(self.groups) for job in group}
        self.kind_of = kinds.kind_of
        self.head: dict[int, int] = {}  #: per kind: the prefix region's width
        self.kinds = [self._build_kind(kind, device, dtype) for kind in range(len(kinds.layers))]

    def inputs(self, suffixes: Sequence[Sequence[int]], pad_id: int
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(groups, width) input ids and positions (pads continue the last suffix's)."""
        ids = torch.full((len(self.groups), self.width), pad_id, dtype=torch.long)
        positions = torch.zeros((len(self.groups), self.width), dtype=torch.long)
        for g, group in enumerate(self.groups):
            base = self.prefixes[g].length
            end = 0
            for job in group:
                at, n = self.offset[job], self.lengths[job]
                ids[g, at : at + n] = torch.tensor(list(suffixes[job]), dtype=torch.long)
                positions[g, at : at + n] = base + torch.arange(n)
                end = at + n
            positions[g, end:] = base + torch.arange(self.width - end)
        return ids, positions

    def _build_kind(self, kind: int, device: torch.device, dtype: torch.dtype) -> _Kind:
        kinds = self.layer_kinds
        like = next(p for p in self.prefixes if p.length).kinds[kind][0]
        layers, heads, _, dim = like.shape
        kept = [kinds.kept(kind, p.length) for p in self.prefixes]
        head = max(kept)  # the prefix region, right-aligned: [head - kept, head)
        key_len = -(-(head + self.width) // _ALIGN) * _ALIGN
        groups = len(self.groups)
        keys = like.new_zeros((groups, layers, heads, key_len, dim))
        values = like.new_zeros((groups, layers, heads, key_len, dim))
        for g, prefix in enumerate(self.prefixes):
            kinds._place(keys[:, :, :, :head], values[:, :, :, :head], g, prefix, kind, head)
        window = kinds.window if kinds.sliding[kind] else None
        allowed = torch.zeros((groups, self.width, key_len), dtype=torch.bool)
        for g, group in enumerate(self.groups):
            filled = 0
            for job in group:
                at, n = self.offset[job], self.lengths[job]
                t = torch.arange(n)
                own = t[None, :] <= t[:, None]  # (query step, key step): causal in the suffix
                if window:
                    own &= (t[:, None] - t[None, :]) < window
                allowed[g, at : at + n, head + at : head + at + n] = own
                prefix_pos = torch.arange(head) - head  # relative to the suffix's first token
                ok = prefix_pos[None, :] >= -kept[g]
                if window:
                    ok = ok & ((t[:, None] - prefix_pos[None, :]) < window)
                allowed[g, at : at + n, :head] = ok
                filled = at + n
            allowed[g, filled:, :] = True  # padding queries: anywhere (discarded)
        q_per_kv = self.query_heads // heads
        full = allowed.to(device)[:, None, None].expand(groups, 1, q_per_kv, self.width, key_len)
        bias = torch.zeros(full.shape, dtype=dtype, device=device).masked_fill_(
            ~full, float("-inf")).reshape(groups, 1, -1, key_len)
        self.head[kind] = head
        return _Kind(keys, values, bias, torch.empty(0))

    # -- the encoder's view (eager under a compiled layer: ``compiled.py``) ----------------------

    @torch.compiler.disable
    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int,
               **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        kind_id, j = self.kind_of[layer_idx]
        kind, head = self.kinds[kind_id], self.head[kind_id]
        keys, values = kind.keys[:, j], kind.values[:, j]
        keys[:, :, head : head + self.width] = key
        values[:, :, head : head + self.width] = value
        return keys, values

    @torch.compiler.disable
    def attend(self, module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
               ) -> torch.Tensor:
        kind = self.kinds[self.kind_of[module.layer_idx][0]]
        groups, heads, width, dim = query.shape
        kv_heads = key.shape[1]
        folded = query.reshape(groups, kv_heads, -1, dim)  # heads of one kv head, then steps
        out = torch.nn.functional.scaled_dot_product_attention(
            folded, key, value, attn_mask=kind.bias, scale=module.scaling)
        return out.reshape(groups, heads, width, dim).transpose(1, 2)

    def entries(self) -> list[KVEntry]:
        """One entry per suffix (own memory), under its prefix."""
        out = []
        for job, n in enumerate(self.lengths):
            g, at = self.group_of[job], self.offset[job]
            prefix = self.prefixes[g]
            kinds = []
            for kind_id, kind in enumerate(self.kinds):
                head = self.head[kind_id]
                keep = self.layer_kinds.kept(kind_id, n)
                start = head + at + n - keep
                kinds.append((kind.keys[g, :, :, start : start + keep].clone(),
                              kind.values[g, :, :, start : start + keep].clone()))
            out.append(KVEntry(prefix.length + n, tuple(kinds), prefix))
        return out
