"""Images of decisions: fetched, checked and hashed (I/O; ``app.engine`` gets ``ImageData``).

A decision's images are given as references (``Decision.images``): http(s) URLs, ``file://``
URLs under a directory the user allows, or data URLs. ``fetch_image`` (and its async twin)
turns one into an ``ImageData``: the bytes read under the ``ImagePolicy`` (size limit, allowed
directories, timeout), opened with pillow, hashed, and carried as a data URL.

At submit every image is fetched once and its ``StoredImage`` (reference, sha256, media type,
size; not the bytes) goes into the decision's payload. A worker fetches each image of a decision
once per attempt through an ``ImageCache`` (by sha256), checks the bytes against the stored
sha256, and hands the ``ImageData`` to ``plan_decision``: every draw of the attempt reuses it.
"""

from __future__ import annotations

from app.images.cache import ImageCache
from app.images.check import check_image
from app.images.fetch import fetch_image, fetch_image_async
from app.images.policy import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S, ImagePolicy, parse_image_dirs
from app.images.refs import short_ref, shown_ref
from app.images.stored import StoredImage, stored_image, stored_images

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TIMEOUT_S",
    "ImageCache",
    "ImagePolicy",
    "StoredImage",
    "check_image",
    "fetch_image",
    "fetch_image_async",
    "parse_image_dirs",
    "short_ref",
    "shown_ref",
    "stored_image",
    "stored_images",
]
