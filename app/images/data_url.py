"""Data URLs: the bytes and media type of ``data:image/png;base64,...``, and the data URL of
fetched bytes (what a request carries)."""

from __future__ import annotations

import base64
import binascii
from urllib.parse import unquote_to_bytes

from app.errors import ImageError
from app.images.limits import image_too_large
from app.images.refs import short_ref

__all__ = ["decode_data_url", "encode_data_url"]


def decode_data_url(ref: str, *, max_bytes: int) -> tuple[bytes, str | None]:
    """The bytes of a ``data:`` URL and the media type it declares (None: none declared).

    Raises:
        ImageError: not a data URL dreads can decode, or over ``max_bytes``.
    """
    head, comma, body = ref.partition(",")
    if not comma:
        raise ImageError(f"image {short_ref(ref)}: a data URL needs a ',' before its data "
                         "(data:image/png;base64,...)")
    params = head[len("data:"):].split(";")
    media_type = params[0].strip().lower() or None
    is_base64 = any(p.strip().lower() == "base64" for p in params[1:])
    estimate = len(body) * 3 // 4 if is_base64 else len(body)
    if estimate > max_bytes + 3:  # refused before decoding a huge string
        raise image_too_large(ref, max_bytes, estimate)
    try:
        data = base64.b64decode(body, validate=True) if is_base64 else unquote_to_bytes(body)
    except (binascii.Error, ValueError):
        raise ImageError(f"image {short_ref(ref)}: its base64 data cannot be decoded; check "
                         "the data URL") from None
    if len(data) > max_bytes:
        raise image_too_large(ref, max_bytes, len(data))
    return data, media_type


def encode_data_url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
