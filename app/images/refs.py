"""What kind of reference an image is, and the short form a message shows of it."""

from __future__ import annotations

from typing import Literal

from app.errors import ImageError

__all__ = ["RefKind", "ref_kind", "short_ref", "shown_ref"]

RefKind = Literal["data", "file", "http"]

#: The longest reference a message quotes whole.
_SHOWN = 120


def short_ref(ref: str) -> str:
    """``ref`` as a message quotes it: a long data URL by its head and length."""
    if len(ref) <= _SHOWN:
        return repr(ref)
    head = ref[:ref.find(",") + 1] if 0 < ref.find(",") < 60 else ref[:60]
    return f"'{head}...' ({len(ref):,} characters)"


def shown_ref(ref: str) -> str:
    """``ref`` as a report or a table shows it: a URL whole, a data URL by its media type and
    length (its bytes are in the export)."""
    if not ref[:5].lower().startswith("data:") or len(ref) <= _SHOWN:
        return ref
    head = ref[:ref.find(",")] if 0 < ref.find(",") < 60 else ref[:40]
    return f"{head},... ({len(ref):,} characters)"


def ref_kind(ref: str) -> RefKind:
    """``data``, ``file`` or ``http`` (http and https).

    Raises:
        ImageError: any other scheme.
    """
    lowered = ref[:8].lower()
    if lowered.startswith("data:"):
        return "data"
    if lowered.startswith("file://"):
        return "file"
    if lowered.startswith(("http://", "https://")):
        return "http"
    raise ImageError(f"image {short_ref(ref)}: not an http(s), file:// or data: URL; give the "
                     "image as one of those")
