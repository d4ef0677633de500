"""A bounded (by bytes) LRU of prompt KV entries, keyed by the prompt's token ids.

Holds both whole prompts and shared prefixes (a decision's system text and document, which
every question of the document-first layout starts with). ``longest_prefix`` finds the longest
cached entry that a new prompt starts with, so only the rest has to be encoded.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence

from app.inprocess.model import KVEntry

__all__ = ["PrefillCache"]


class PrefillCache:
    """LRU by bytes. Entries are never modified; evicting one only drops the reference."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[tuple[int, ...], KVEntry] = OrderedDict()
        self._lengths: Counter[int] = Counter()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, ids: object) -> bool:
        return ids in self._entries

    def get(self, ids: tuple[int, ...]) -> KVEntry | None:
        """The entry of exactly ``ids``, marked most recently used."""
        entry = self._entries.get(ids)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(ids)
        return entry

    def longest_prefix(self, ids: Sequence[int], *, min_len: int = 1) -> KVEntry | None:
        """The longest cached entry that is a proper prefix of ``ids`` (at least ``min_len``)."""
        for length in sorted(self._lengths, reverse=True):
            if length >= len(ids) or length < min_len:
                continue
            key = tuple(ids[:length])
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        return None

    def put(self, ids: tuple[int, ...], entry: KVEntry) -> None:
        """Add (or refresh) an entry, then evict least recently used ones over the budget."""
        if ids in self._entries:
            self._entries.move_to_end(ids)
            return
        size = entry.nbytes
        if size > self.max_bytes:
            return  # larger than the whole cache: used for this batch only
        self._entries[ids] = entry
        self._lengths[len(ids)] += 1
        self.bytes += size
        while self.bytes > self.max_bytes:
            self._evict_oldest()

    def clear(self) -> None:
        self._entries.clear()
        self._lengths.clear()
        self.bytes = 0

    def _evict_oldest(self) -> None:
        ids, entry = self._entries.popitem(last=False)
        self.bytes -= entry.nbytes
        self._lengths[len(ids)] -= 1
        if not self._lengths[len(ids)]:
            del self._lengths[len(ids)]
