"""Bytes -> ``ImageData``: opened and decoded with pillow, typed, measured and hashed."""

from __future__ import annotations

import hashlib
import io
import warnings

from PIL import Image

from app.engine.types import ImageData
from app.errors import ImageError
from app.images.data_url import encode_data_url
from app.images.policy import DEFAULT_MAX_PIXELS
from app.images.refs import short_ref

__all__ = ["check_image"]

#: Media types that say the bytes are not an image, whatever they hold.
_GENERIC = frozenset({"application/octet-stream", "binary/octet-stream"})


def _declared_not_image(media_type: str | None) -> bool:
    return (media_type is not None and not media_type.startswith("image/")
            and media_type not in _GENERIC)


def _open(ref: str, data: bytes, max_pixels: int) -> tuple[str, int, int]:
    """(media type, width, height) of bytes pillow can decode whole, once their header says
    they have at most ``max_pixels`` pixels (read before any pixel is decoded)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:  # reads the header only
                if image.width * image.height > max_pixels:
                    raise ImageError(
                        f"image {short_ref(ref)}: {image.width} x {image.height} pixels, over "
                        f"the limit of {max_pixels:,}; shrink it (the model sees at most "
                        "about 0.65 megapixels) or raise DREADS_IMAGE_MAX_PIXELS")
                image.load()  # a truncated or corrupt file fails here, not in the server
                media_type = Image.MIME.get(image.format or "", "")
                return media_type, image.width, image.height
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageError(f"image {short_ref(ref)}: too many pixels to decode safely; "
                         "shrink it") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError(f"image {short_ref(ref)}: not an image pillow can read ({exc}); "
                         "give a PNG, JPEG, GIF or WebP file") from None


def check_image(ref: str, data: bytes, *, declared_type: str | None = None,
                max_pixels: int = DEFAULT_MAX_PIXELS) -> ImageData:
    """The image of ``data`` fetched from ``ref``: its media type (from its bytes, not from
    what the source declared), size, sha256 and data URL.

    Raises:
        ImageError: ``declared_type`` is not an image type, the header says more than
            ``max_pixels`` pixels, or pillow cannot decode the bytes.
    """
    if _declared_not_image(declared_type):
        raise ImageError(f"image {short_ref(ref)}: it is declared as {declared_type}, not "
                         "an image; give the URL of the image itself")
    media_type, width, height = _open(ref, data, max_pixels)
    if not media_type.startswith("image/"):
        raise ImageError(f"image {short_ref(ref)}: pillow reads it but knows no image media "
                         "type for it; give a PNG, JPEG, GIF or WebP file")
    return ImageData(ref=ref, url=encode_data_url(data, media_type),
                     sha256=hashlib.sha256(data).hexdigest(), media_type=media_type,
                     width=width, height=height)
