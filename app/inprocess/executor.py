"""One batch of reads, synchronously (it runs on the engine's worker thread).

1. Every distinct prompt gets a KV entry: from the prefill cache, else by extending the longest
   cached prefix, else by extending a prefix shared with other prompts of the batch (encoded
   once, then cached), else from scratch. Encoder calls are batched under a token budget.
   A prompt with images is keyed by its ids and its images (``ReadJob.key``: their placeholder
   ids are the same for any image) and encoded whole, its images' features in place.
2. Reads are grouped by canvas width and decoded ``decode_batch`` canvases per call.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

from app.engine.types import SlotRow
from app.inprocess.images import ImageInputs
from app.inprocess.model import (
    DecodeRow,
    ImagePrefill,
    KVEntry,
    PrefillJob,
    ReadModel,
    SlotLogprobs,
)
from app.inprocess.prefill_cache import PrefillCache

__all__ = ["BatchExecutor", "BatchStats", "JobOutput", "ReadJob", "shared_prefix_groups"]

log = logging.getLogger("dreads.upstream.transformers")

Prompt = tuple[int, ...]
_IMAGES = -1  #: no token id: a key with images is never a text prompt or its prefix


@dataclass(frozen=True)
class ReadJob:
    """One validated read: prompt ids, seeded canvas, slot positions, ids to report, and the
    prompt's images (None: a text prompt)."""

    prompt: Prompt
    canvas: tuple[int, ...]
    slots: tuple[int, ...]
    logprob_ids: tuple[int, ...]
    constrained: bool = False
    images: ImageInputs | None = None

    @property
    def key(self) -> Prompt:
        """What the prompt's KV entry is cached under: its ids, followed for a prompt with
        images by a marker and the images' digest."""
        if self.images is None:
            return self.prompt
        return (*self.prompt, _IMAGES, *self.images.key)


@dataclass(frozen=True)
class JobOutput:
    rows: dict[int, SlotRow]
    prompt_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class BatchStats:
    """What the last batch did (for benchmarks and logs)."""

    reads: int
    prompts: int
    prefilled_tokens: int
    encoder_calls: int
    decoder_calls: int
    encoder_s: float = 0.0
    decoder_s: float = 0.0


def shared_prefix_groups(
    prompts: Sequence[Prompt], *, min_tokens: int, share: float
) -> list[tuple[int, list[Prompt]]]:
    """Group prompts whose common prefix is at least ``min_tokens`` and ``share`` of the shorter.

    Returns (prefix length, members) per group of two or more; each member keeps at least one
    token after the prefix. A trailing ``(0, singles)`` holds the prompts in no group.
    """
    order = sorted(prompts)
    groups: list[tuple[int, list[Prompt]]] = []
    singles: list[Prompt] = []
    run: list[Prompt] = order[:1]
    run_lcp = 1 << 30

    def close() -> None:
        n = min(run_lcp, min(len(p) for p in run) - 1)
        if len(run) > 1 and n > 0:
            groups.append((n, list(run)))
        else:
            singles.extend(run)

    for a, b in pairwise(order):
        common = _common_prefix(a, b)
        if common >= max(min_tokens, share * min(len(a), len(b))):
            run.append(b)
            run_lcp = min(run_lcp, common)
            continue
        close()
        run, run_lcp = [b], 1 << 30
    close()
    if singles:
        groups.append((0, singles))
    return groups


class BatchExecutor:
    """Turns a list of ReadJobs into JobOutputs with as few forwards as it can."""

    def __init__(self, model: ReadModel, cache: PrefillCache, *, prefill_token_budget: int,
                 decode_batch: int, decode_token_budget: int = 65536,
                 min_shared_prefix: int = 32, shared_share: float = 0.5) -> None:
        self.model = model
        self.cache = cache
        self.prefill_token_budget = prefill_token_budget
        self.decode_batch = decode_batch
        self.decode_token_budget = decode_token_budget
        self.min_shared_prefix = min_shared_prefix
        self.shared_share = shared_share
        self.last = BatchStats(0, 0, 0, 0, 0)
        #: when a list: every forward's shape and seconds are appended, ("prefill", rows,
        #: longest, tokens, rows after a cached prefix, s) or ("decode", rows, longest prompt,
        #: canvas width, slots per row, s) (benchmarks)
        self.trace: list[tuple[str | int | float, ...]] | None = None
        self.totals: Counter[str] = Counter()  #: BatchStats summed over every batch
        self._encoder_calls = self._decoder_calls = self._prefilled = 0
        self._encoder_s = self._decoder_s = 0.0

    def run(self, jobs: Sequence[ReadJob]) -> list[JobOutput]:
        """Answer every job (same order)."""
        self._encoder_calls = self._decoder_calls = self._prefilled = 0
        self._encoder_s = self._decoder_s = 0.0
        entries, reused = self._entries(jobs)
        outputs: list[JobOutput | None] = [None] * len(jobs)
        seen: set[Prompt] = set()
        cached_tokens = []
        for job in jobs:
            cached_tokens.append(len(job.prompt) if job.key in seen else reused[job.key])
            seen.add(job.key)
        for group in _by_width(jobs):
            for chunk in self._decode_chunks(group, jobs, entries):
                rows = [_decode_row(jobs[i], entries[jobs[i].key]) for i in chunk]
                self._decoder_calls += 1
                started = time.perf_counter()
                results = self.model.decode(rows)
                elapsed = time.perf_counter() - started
                self._decoder_s += elapsed
                if self.trace is not None:
                    self.trace.append(("decode", len(rows), max(r.entry.length for r in rows),
                                       len(rows[0].canvas), len(rows[0].slots), elapsed))
                for i, result in zip(chunk, results, strict=True):
                    outputs[i] = JobOutput(_slot_rows(jobs[i], result), len(jobs[i].prompt),
                                           cached_tokens[i])
        self.last = BatchStats(len(jobs), len(entries), self._prefilled, self._encoder_calls,
                               self._decoder_calls, self._encoder_s, self._decoder_s)
        for name, value in dataclasses.asdict(self.last).items():
            self.totals[name] += value
        return [o for o in outputs if o is not None]

    def _decode_chunks(self, group: list[int], jobs: Sequence[ReadJob],
                       entries: dict[Prompt, KVEntry]) -> Iterator[list[int]]:
        """At most ``decode_batch`` rows and ``decode_token_budget`` rows x longest prompt;
        rows whose prompts share a root entry (a state's document) stay next to each other, so a
        packed decoder call reads that root once for all of them."""
        def order(i: int) -> tuple[int, int, int]:
            entry = entries[jobs[i].key]
            root = entry.root
            return (root.length, roots.setdefault(id(root), len(roots)), entry.length)

        roots: dict[int, int] = {}
        group = sorted(group, key=order)
        chunk: list[int] = []
        cost = 0
        seen: set[int] = set()
        for i in group:
            added = self._decode_cost(jobs[i], entries[jobs[i].key], seen)
            if chunk and (len(chunk) >= self.decode_batch
                          or cost + added > self.decode_token_budget):
                yield chunk
                chunk, cost, seen = [], 0, set()
                added = self._decode_cost(jobs[i], entries[jobs[i].key], seen)
            chunk.append(i)
            cost += added
        if chunk:
            yield chunk

    def _decode_cost(self, job: ReadJob, entry: KVEntry, seen: set[int]) -> int:
        """Key tokens a row adds to a decoder call: its canvas, plus its prompt's own tokens
        and root the first time they appear (the packed path holds each once; the collated
        path holds every row's whole prompt)."""
        if not self.model.packed:
            return entry.length + len(job.canvas)
        cost = len(job.canvas)
        root = entry.root
        for node in (entry, root):
            if id(node) not in seen:
                seen.add(id(node))
                cost += node.length - (root.length if node is not root else 0)
        return cost

    # -- prompt entries -------------------------------------------------------------------------

    def _entries(self, reads: Sequence[ReadJob]
                 ) -> tuple[dict[Prompt, KVEntry], dict[Prompt, int]]:
        """A KV entry per distinct prompt (by ``ReadJob.key``), and how many of its tokens
        were reused."""
        entries: dict[Prompt, KVEntry] = {}
        reused: dict[Prompt, int] = {}
        misses: list[Prompt] = []
        with_images: dict[Prompt, ImagePrefill] = {}
        for key, read in {r.key: r for r in reads}.items():
            entry = self.cache.get(key)
            if entry is not None:
                entries[key], reused[key] = entry, len(read.prompt)
            elif read.images is not None:
                with_images[key], reused[key] = ImagePrefill(read.prompt, read.images), 0
            else:
                misses.append(key)
        for key, entry in self._prefill_images(with_images):
            self.cache.put(key, entry)
            entries[key] = entry
        jobs: list[tuple[Prompt, PrefillJob]] = []
        fresh: list[Prompt] = []
        for prompt in misses:
            prefix = self.cache.longest_prefix(prompt, min_len=self.min_shared_prefix)
            if prefix is None:
                fresh.append(prompt)
            else:
                jobs.append((prompt, PrefillJob(prefix, prompt[prefix.length :])))
                reused[prompt] = prefix.length
        jobs.extend(self._shared_jobs(fresh, reused))
        for prompt, entry in self._prefill(jobs):
            self.cache.put(prompt, entry)
            entries[prompt] = entry
        return entries, reused

    def _shared_jobs(self, prompts: list[Prompt], reused: dict[Prompt, int]
                     ) -> list[tuple[Prompt, PrefillJob]]:
        """Encode each batch-shared prefix once (and cache it); the prompts extend it."""
        if not prompts:
            return []
        groups = shared_prefix_groups(prompts, min_tokens=self.min_shared_prefix,
                                      share=self.shared_share)
        heads = {members[0][:n]: PrefillJob(None, members[0][:n]) for n, members in groups if n}
        prefixes = dict(self._prefill(list(heads.items())))
        jobs: list[tuple[Prompt, PrefillJob]] = []
        for n, members in groups:
            for prompt in members:
                reused[prompt] = n
                if n:
                    self.cache.put(prompt[:n], prefixes[prompt[:n]])
                jobs.append((prompt, PrefillJob(prefixes[prompt[:n]] if n else None, prompt[n:])))
        return jobs

    def _prefill_images(self, jobs: dict[Prompt, ImagePrefill]
                        ) -> Iterator[tuple[Prompt, KVEntry]]:
        """Encode the prompts with images, one encoder call each (``ReadModel.prefill_images``)."""
        for key, job in jobs.items():
            self._encoder_calls += 1
            self._prefilled += len(job.ids)
            started = time.perf_counter()
            entry = self.model.prefill_images([job])[0]
            elapsed = time.perf_counter() - started
            self._encoder_s += elapsed
            if self.trace is not None:
                self.trace.append(("prefill", 1, len(job.ids), len(job.ids), 0, elapsed))
            yield key, entry

    def _prefill(self, jobs: list[tuple[Prompt, PrefillJob]]) -> Iterator[tuple[Prompt, KVEntry]]:
        """Run the jobs in encoder calls of at most ``prefill_token_budget`` tokens (padded
        ones on the collated path)."""
        prefixes: dict[int, int] = {}

        def order(item: tuple[Prompt, PrefillJob]) -> tuple[int, int]:
            prefix = item[1].prefix
            if not self.model.packed or prefix is None:
                return (0, len(item[1].ids))
            # packed: a prefix's suffixes in one call (one encoder row for all of them)
            return (1 + prefixes.setdefault(id(prefix), len(prefixes)), len(item[1].ids))

        jobs = sorted(jobs, key=order)
        for chunk in _budget_chunks(jobs, self.prefill_token_budget, self.decode_batch,
                                    padded=not self.model.packed):
            self._encoder_calls += 1
            tokens = sum(len(j.ids) for _, j in chunk)
            self._prefilled += tokens
            started = time.perf_counter()
            entries = self.model.prefill([j for _, j in chunk])
            elapsed = time.perf_counter() - started
            self._encoder_s += elapsed
            if self.trace is not None:
                self.trace.append(("prefill", len(chunk), max(len(j.ids) for _, j in chunk),
                                   tokens, sum(j.prefix is not None for _, j in chunk), elapsed))
            yield from zip((k for k, _ in chunk), entries, strict=True)


def _common_prefix(a: Prompt, b: Prompt) -> int:
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def _budget_chunks(jobs: list[tuple[Prompt, PrefillJob]], budget: int, max_rows: int, *,
                   padded: bool) -> Iterator[list[tuple[Prompt, PrefillJob]]]:
    """Consecutive chunks of at most ``max_rows`` jobs whose size fits ``budget``: rows x
    longest when ``padded`` (a right-padded batch), else the tokens themselves (packed end to
    end)."""
    chunk: list[tuple[Prompt, PrefillJob]] = []
    longest = tokens = 0
    for item in jobs:
        n = len(item[1].ids)
        size = (len(chunk) + 1) * max(longest, n) if padded else tokens + n
        if chunk and (size > budget or len(chunk) >= max_rows):
            yield chunk
            chunk, longest, tokens = [], 0, 0
        chunk.append(item)
        longest, tokens = max(longest, n), tokens + n
    if chunk:
        yield chunk


def _by_width(jobs: Sequence[ReadJob]) -> list[list[int]]:
    groups: dict[int, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(len(job.canvas), []).append(i)
    return list(groups.values())


def _decode_row(job: ReadJob, entry: KVEntry) -> DecodeRow:
    return DecodeRow(entry, job.canvas, job.slots, job.logprob_ids, job.constrained)


def _slot_rows(job: ReadJob, result: SlotLogprobs) -> dict[int, SlotRow]:
    rows: dict[int, SlotRow] = {}
    values = result.logprobs.tolist()
    for k, slot in enumerate(job.slots):
        rows[slot] = SlotRow(
            logprobs=dict(zip(job.logprob_ids, values[k], strict=True)),
            argmax_id=int(result.argmax_ids[k]),
            argmax_logprob=float(result.argmax_logprobs[k]),
        )
    return rows
