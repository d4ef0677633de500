"""The simulator's view of the tokenizer: pieces of ids, slot finding, prompt ids, prefix cache."""

from __future__ import annotations

import hashlib
import re
from array import array
from collections import OrderedDict
from collections.abc import Collection, Sequence
from functools import lru_cache
from typing import Any

from app.engine.types import Message

__all__ = ["PrefixCache", "SimTokenizer", "find_slots", "load_sim_tokenizer", "text_of"]

BLOCK = 16  #: vLLM's prefix-cache block size
_TAIL_TOKENS = 6
_LINE_SLOT = re.compile(r"(?:^|[\n>])[ \t]*(q?\d+):[ \t]?$")
_INDEXED_SLOT = re.compile(r"(?:^|[\s>])(q\d+)$")
_TURN = re.compile(r"<(?:start_of_turn|\|turn)>(system|user)\n(.*?)<(?:end_of_turn|turn\|)>",
                   re.DOTALL)


class SimTokenizer:
    """Decodes single ids (cached) and renders prompts, for the simulator only."""

    def __init__(self, text_tokenizer: Any) -> None:
        self.text = text_tokenizer
        self.hf = text_tokenizer.hf
        self.vocab_size: int = int(text_tokenizer.info.vocab_size)
        self.turn_close_id: int = int(text_tokenizer.info.turn_close_id)
        self.piece = lru_cache(maxsize=65536)(self._piece)
        self.prompt_ids = lru_cache(maxsize=4096)(self._prompt_ids)

    def _piece(self, token_id: int) -> str:
        return str(self.hf.decode([token_id], skip_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.hf.decode(list(ids), skip_special_tokens=False))

    def _prompt_ids(self, messages: tuple[tuple[str, str], ...], add_generation_prompt: bool,
                    continue_final_message: bool) -> tuple[int, ...]:
        msgs: tuple[Message, ...] = tuple({"role": r, "content": c} for r, c in messages)
        return tuple(self.text.render_chat(msgs, add_generation_prompt=add_generation_prompt,
                                           continue_final_message=continue_final_message))

    def image_prompt_ids(self, messages: tuple[Message, ...], sizes: Sequence[tuple[int, int]],
                         add_generation_prompt: bool, continue_final_message: bool
                         ) -> tuple[int, ...]:
        """The prompt ids of messages with ``image_url`` parts, each image taking the ids of its
        (width, height) by the tokenizer's rule (``image_ids``), as dreads plans them."""
        return tuple(self.text.render_chat(
            messages, add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message, image_sizes=tuple(sizes)))

    def messages_from_prompt(self, prompt_ids: Sequence[int]) -> list[dict[str, str]]:
        """The system/user turns of a completions prompt, decoded back to text."""
        text = self.decode(prompt_ids)
        return [{"role": role, "content": content} for role, content in _TURN.findall(text)]


def text_of(content: Any) -> str:
    """A message's text: its content, or the text of its ``text`` parts."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content
                       if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


@lru_cache(maxsize=4)
def load_sim_tokenizer(name: str) -> SimTokenizer:
    """The tokenizer ``name`` ("standin", a hub id or a path) for the simulator."""
    from app.tokenizer.hf import load_tokenizer

    return SimTokenizer(load_tokenizer(name))


def find_slots(
    tokenizer: SimTokenizer, canvas: Sequence[int], rows: int, pinned: Sequence[int] | None,
    known: Collection[str] | None = None, *, reply_slot: bool = False,
) -> dict[int, str]:
    """Slot position -> slot name. ``reply_slot`` (an isolated read of vLLM's reader): the
    reply's first token, position 0, named "". Otherwise the positions that end an answer line's
    prefix, ``q<k>:`` or ``<k>:`` at a line start, optionally followed by a lone space token,
    and are followed by a newline or the turn close (a score digit after ``: `` sits one
    position past the space); when no line matches, ``q<k>`` of the indexed format. With a
    pinned list only unpinned positions are candidates; with ``known`` names only those count
    (a noise digit after ``q8`` does not make a ``q89``)."""
    if reply_slot:
        return {0: ""} if rows > 0 and (pinned is None or 0 not in pinned) else {}
    candidates = range(1, rows) if pinned is None else sorted(set(range(rows)) - set(pinned))
    tails = {p: _tail(tokenizer, canvas, p) for p in candidates if p > 0}
    ends = {p: t for p, t in tails.items() if _ends_line(tokenizer, canvas, p)}
    return _match(_latest(ends), _LINE_SLOT, known) or _match(tails, _INDEXED_SLOT, known)


def _latest(tails: dict[int, str]) -> dict[int, str]:
    """Of two neighbours that both end the same line prefix (``q1:`` then a lone space whose
    noise is a newline), the later one is the slot."""
    names = {p: m.group(1) for p, t in tails.items() if (m := _LINE_SLOT.search(t))}
    return {p: t for p, t in tails.items()
            if p not in names or names.get(p + 1) != names[p]}


def _ends_line(tokenizer: SimTokenizer, canvas: Sequence[int], position: int) -> bool:
    if position + 1 >= len(canvas):
        return True
    after = canvas[position + 1]
    return after == tokenizer.turn_close_id or tokenizer.piece(after) == "\n"


def _tail(tokenizer: SimTokenizer, canvas: Sequence[int], position: int) -> str:
    return "".join(tokenizer.piece(i) for i in canvas[max(0, position - _TAIL_TOKENS):position])


def _match(tails: dict[int, str], pattern: re.Pattern[str],
           known: Collection[str] | None) -> dict[int, str]:
    """The matches that read as q0, q1, ... (or 1, 2, ...) in increasing order (a template
    lists its ids in order): the longest such chain drops look-alikes such as "q1" before the
    "0" of "q10", or a noise digit after "q1" that spells "q10"."""
    found = sorted((p, m.group(1)) for p, tail in tails.items() if (m := pattern.search(tail))
                   and (known is None or m.group(1) in known))
    index = [int(name.lstrip("q")) for _, name in found]
    length = [1] * len(found)
    previous = [-1] * len(found)
    for k in range(len(found)):
        for j in range(k):
            if index[j] < index[k] and length[j] + 1 > length[k]:
                length[k], previous[k] = length[j] + 1, j
    if not found:
        return {}
    k = length.index(max(length))
    slots: dict[int, str] = {}
    while k >= 0:
        slots[found[k][0]] = found[k][1]
        k = previous[k]
    return slots


class PrefixCache:
    """vLLM-style prefix cache accounting: full blocks of 16 tokens, chained hashes, LRU."""

    def __init__(self, max_blocks: int = 100_000) -> None:
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def lookup_and_insert(self, prompt_ids: Sequence[int]) -> int:
        """Tokens of the prompt already cached (a multiple of 16), then remember the prompt."""
        chain = self._chain(tuple(prompt_ids))
        cached = 0
        for digest in chain:
            if digest not in self._blocks:
                break
            cached += BLOCK
        for digest in chain:
            self._blocks[digest] = None
            self._blocks.move_to_end(digest)
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)
        # vLLM always computes at least the last token.
        return min(cached, max(0, (len(prompt_ids) - 1) // BLOCK * BLOCK))

    @staticmethod
    @lru_cache(maxsize=1024)
    def _chain(prompt_ids: tuple[int, ...]) -> tuple[bytes, ...]:
        data = array("I", prompt_ids).tobytes()
        size = BLOCK * 4
        digests: list[bytes] = []
        parent = b""
        for start in range(0, len(data) - size + 1, size):
            parent = hashlib.blake2b(parent + data[start:start + size], digest_size=16).digest()
            digests.append(parent)
        return tuple(digests)
