"""What a decision's payload keeps of each image: its reference and what was checked at
submit, not the bytes (except that a data URL's reference is its bytes).

    "images": [{"ref", "sha256", "media_type", "width", "height", "bytes"}, ...]

A record without ``sha256`` was not checked when it was stored (a decision recorded from a
request rather than submitted): a worker then uses the bytes it fetches as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.engine.types import ImageData
from app.errors import InputError

__all__ = ["StoredImage", "stored_image", "stored_images"]


@dataclass(frozen=True)
class StoredImage:
    """One image of a stored decision."""

    ref: str
    sha256: str | None = None  #: of the bytes checked at submit; None: not checked
    media_type: str | None = None
    width: int | None = None
    height: int | None = None
    size: int | None = None  #: bytes (the record's ``"bytes"``)

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"ref": self.ref}
        if self.sha256 is not None:
            record.update(sha256=self.sha256, media_type=self.media_type, width=self.width,
                          height=self.height, bytes=self.size)
        return record

    @classmethod
    def from_json(cls, raw: Any) -> StoredImage:
        """Raises InputError: not a stored image record."""
        if isinstance(raw, str):
            return cls(ref=raw)
        if not isinstance(raw, Mapping) or not isinstance(raw.get("ref"), str):
            raise InputError(f"a stored image must be an object with 'ref', got {raw!r:.80}")
        return cls(ref=raw["ref"], sha256=raw.get("sha256"), media_type=raw.get("media_type"),
                   width=raw.get("width"), height=raw.get("height"), size=raw.get("bytes"))


def _data_size(url: str) -> int:
    """The byte count of a base64 data URL's data, without decoding it."""
    body = url.partition(",")[2]
    return len(body) * 3 // 4 - body[-2:].count("=")


def stored_image(image: ImageData) -> StoredImage:
    """The record of an image checked at submit."""
    return StoredImage(ref=image.ref, sha256=image.sha256, media_type=image.media_type,
                       width=image.width, height=image.height, size=_data_size(image.url))


def stored_images(payload: Mapping[str, Any]) -> tuple[StoredImage, ...]:
    """The images of a stored decision's payload, in order; () for a text decision.

    Raises:
        InputError: the payload's ``images`` is not a list of image records.
    """
    raw = payload.get("images")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InputError("a stored decision's 'images' must be a list")
    return tuple(StoredImage.from_json(item) for item in raw)
