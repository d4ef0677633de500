"""Build the offline stand-in tokenizer: Gemma-shaped, tiny (<= 1024 ids), no download.

It has DiffusionGemma's special-token roles and ids (``<pad>``=0, ``<eos>``=1, ``<bos>``=2,
``<unk>``=3, ``<mask>``=4, ``<|think|>``=98, ``<|channel>``=100, ``<channel|>``=101,
``<|turn>``=105, ``<turn|>``=106, ``"\\n"``=107), byte fallback, and a chat template of the
real shape with thinking off. Its image tokens have Gemma 4's names at ids of its own:
``<|image>``=102, ``<|image|>``=103, ``<image|>``=104 (named ``boi_token``, ``image_token``,
``eoi_token`` as in Gemma 4's tokenizer config); an image takes as many tokens as Gemma 4's
image processor gives it (``app.engine.image_tokens``, at most 280 + 2).

Where dreads' logic depends on the vocabulary it agrees with Gemma's real one
(``../shared/tokenizers/diffusiongemma-approx``): after a space, ``yes``, ``no`` and
``A``..``Z`` are single ``▁X`` tokens; at the start of a reply ``yes``, ``no``, ``A``..``Z`` and
``0``..``9`` are single tokens; digits never merge with a space or with each
other (``": 1"`` is ``:``, ``▁``, ``1``), and ``:`` and the newline never merge. The built
files are committed under ``app/assets/standin_tokenizer``::

    python -m app.tokenizer.standin app/assets/standin_tokenizer
"""

from __future__ import annotations

import string
import sys
from pathlib import Path
from typing import Any, cast

__all__ = ["CHAT_TEMPLATE", "MAX_VOCAB", "build_standin", "build_vocab", "main"]

MAX_VOCAB = 1024
SPACE = "▁"
_FIXED = {
    "<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<mask>": 4, "<|think|>": 98,
    "<|channel>": 100, "<channel|>": 101, "<|image>": 102, "<|image|>": 103, "<image|>": 104,
    "<|turn>": 105, "<turn|>": 106, "\n": 107,
}
_SPECIALS = ["<|think|>", "<|channel>", "<channel|>", "<|turn>", "<turn|>"]
#: Gemma 4's named image tokens (transformers' Gemma4Processor reads them by these names).
_IMAGE_TOKENS = {"boi_token": "<|image>", "image_token": "<|image|>", "eoi_token": "<image|>"}
#: Labels that merge with a leading space, as in Gemma's vocabulary (digits never do).
_SPACED_LABELS = ["yes", "no", *string.ascii_uppercase]
_WORDS = [
    "thought", "system", "user", "model", "Document", "Questions", "Answer", "yes", "no",
    "the", "a", "an", "is", "are", "of", "and", "or", "to", "in", "on", "for", "with", "by",
    "this", "that", "it", "not", "be", "as", "at", "from", "each", "one", "line", "question",
    "questions", "answer", "label", "labels", "document", "only", "Is", "Does", "Do", "What",
    "Which", "sky", "blue", "red", "clause", "contract", "party", "buyer", "seller", "price",
]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% set thinking = enable_thinking | default(false) %}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<|turn>' + role + '\\n' }}"
    "{% if role == 'system' and thinking %}{{ '<|think|>\\n' }}{% endif %}"
    "{{ message['content'] + '<turn|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|turn>model\\n' }}"
    "{% if not thinking %}{{ '<|channel>thought\\n<channel|>' }}{% endif %}"
    "{% endif %}"
)


def _base_vocab() -> dict[str, int]:
    vocab = dict(_FIXED)
    used = set(vocab.values())
    for i in range(108):
        if i not in used:
            vocab[f"<unused{i}>"] = i
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    chars = [SPACE, *(c for c in string.printable if c not in " \t\n\r\x0b\x0c")]
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    return vocab


def _add_word(word: str, vocab: dict[str, int], merges: list[tuple[str, str]]) -> None:
    # Left-to-right merges: every prefix of the word is a token, so BPE rebuilds it whole.
    prefix = word[0]
    for ch in word[1:]:
        merged = prefix + ch
        if merged not in vocab:
            vocab[merged] = len(vocab)
            merges.append((prefix, ch))
        prefix = merged


def build_vocab() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The vocabulary and merges: "▁"-prefixed words first, so they win over bare ones."""
    vocab = _base_vocab()
    merges: list[tuple[str, str]] = []
    for word in dict.fromkeys(SPACE + w for w in [*_SPACED_LABELS, *_WORDS]):
        _add_word(word, vocab, merges)
    for word in dict.fromkeys(_WORDS):
        _add_word(word, vocab, merges)
    if len(vocab) > MAX_VOCAB:
        raise RuntimeError(f"stand-in vocab has {len(vocab)} ids, more than {MAX_VOCAB}")
    return vocab, merges


def build_standin() -> object:
    """The stand-in as a ``transformers`` GemmaTokenizer (not saved)."""
    from transformers import GemmaTokenizer

    vocab, merges = build_vocab()
    tok = GemmaTokenizer(vocab=vocab, merges=cast(Any, merges),  # pairs, as tokenizers takes
                         extra_special_tokens=_IMAGE_TOKENS)
    tok.add_special_tokens({"additional_special_tokens": _SPECIALS})
    tok.chat_template = CHAT_TEMPLATE
    return tok


def main(argv: list[str] | None = None) -> int:
    """``python -m app.tokenizer.standin OUT_DIR``: write the tokenizer files."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m app.tokenizer.standin OUT_DIR\n")
        return 2
    out = Path(args[0])
    out.mkdir(parents=True, exist_ok=True)
    build_standin().save_pretrained(str(out))  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
