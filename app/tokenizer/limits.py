"""The most characters one token of a tokenizer can cover: the bound by which a text is known
to be longer than a context before it is tokenized (``app.engine.state_length``), and
``too_long_for``, the check every entry point (submit, dry run, the API) makes with it."""

from __future__ import annotations

import contextlib
import re
from typing import Any

from app.engine.state_length import DEFAULT_MAX_MODEL_LEN, state_too_long
from app.engine.types import Decision

__all__ = ["FALLBACK_CHARS_PER_TOKEN", "chars_per_token", "too_long_for"]

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


def too_long_for(decision: Decision, tokenizer: Any, max_model_len: int | None) -> str | None:
    """Why ``decision``'s state cannot fit a model read with ``tokenizer`` (None: it may), told
    from its length: ``state_too_long`` with the tokenizer's ``chars_per_token``, against the
    server's ``max_model_len`` (``DEFAULT_MAX_MODEL_LEN`` where it is not known)."""
    return state_too_long(decision, max_model_len or DEFAULT_MAX_MODEL_LEN,
                          chars_per_token(tokenizer))
