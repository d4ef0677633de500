"""The most characters one token of a tokenizer can cover: the bound by which a text is known
to be longer than a context before it is tokenized (``app.engine.state_length``)."""

from __future__ import annotations

import contextlib
import re
from typing import Any

__all__ = ["FALLBACK_CHARS_PER_TOKEN", "chars_per_token"]

#: For a tokenizer whose vocabulary cannot be read: longer than any piece of the tokenizers
#: dreads is used with (Gemma's longest is a run of 31 spaces).
FALLBACK_CHARS_PER_TOKEN = 64
#: Byte-fallback pieces (``<0x41>``): one byte of text each, never matched as text.
_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")
#: Unicode normalizers that compose characters (a Hangul syllable from up to 3 jamo): the
#: text the vocabulary sees may be up to 3 times shorter than the text given.
_COMPOSING = ("NFC", "NFKC")


def _normalizer_factor(hf: Any) -> int:
    backend = getattr(hf, "backend_tokenizer", None)
    normalizer = getattr(backend, "normalizer", None) if backend is not None else None
    text = repr(normalizer) if normalizer is not None else ""
    return 3 if any(f"{name}(" in text or f"{name}," in text for name in _COMPOSING) else 1


def chars_per_token(tokenizer: Any) -> int:
    """The most characters of text one token of ``tokenizer`` stands for: its longest
    vocabulary piece (special tokens included, as their text is matched; a sentencepiece
    ``▁`` counts as the one space it stands for, a byte-level piece as its bytes, which bound
    its characters), times 3 where a normalizer composes characters. Cached on the
    tokenizer."""
    cached = getattr(tokenizer, "_dreads_chars_per_token", None)
    if isinstance(cached, int):
        return cached
    hf = getattr(tokenizer, "hf", None)
    try:
        vocab = hf.get_vocab() if hf is not None else None
    except (AttributeError, TypeError, ValueError):
        vocab = None
    if not vocab:
        return FALLBACK_CHARS_PER_TOKEN
    longest = max((len(piece) for piece in vocab if not _BYTE_PIECE.fullmatch(piece)),
                  default=FALLBACK_CHARS_PER_TOKEN)
    value = max(1, longest) * _normalizer_factor(hf)
    with contextlib.suppress(AttributeError):
        tokenizer._dreads_chars_per_token = value
    return value
