"""Thumbnails of the images of the questions a report page lists: made at report time with
pillow from each image's stored reference, embedded as small PNG data URLs (the page fetches
nothing). An image that cannot be fetched now, or whose bytes are no longer the ones checked
at submit, is shown as its reference, with the reason."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from PIL import Image

from app.errors import ImageError
from app.images import ImagePolicy, StoredImage, fetch_image, shown_ref
from app.report.load import QuestionRow

__all__ = ["THUMBNAIL_PX", "review_thumbnails", "thumbnail_html"]

#: The longest side of a thumbnail, in pixels.
THUMBNAIL_PX = 96
_LISTS = ("missed_positives", "false_positives")


def _thumbnail_url(data_url: str) -> str:
    data = base64.b64decode(data_url.partition(",")[2])
    with Image.open(io.BytesIO(data)) as image:
        image.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
        out = io.BytesIO()
        image.convert("RGBA" if image.mode in ("RGBA", "LA", "P") else "RGB").save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def _as_text(ref: str, why: str) -> str:
    return (f'<span class="imgref" title="{escape(why)}">{escape(shown_ref(ref))}'
            f"<br><small>{escape(why)}</small></span>")


def thumbnail_html(image: StoredImage, policy: ImagePolicy) -> str:
    """An ``<img>`` of the image, or its reference as text when it cannot be shown."""
    try:
        fetched = fetch_image(image.ref, policy=policy)
    except ImageError as exc:
        return _as_text(image.ref, f"not shown: {exc.message}")
    if image.sha256 is not None and fetched.sha256 != image.sha256:
        return _as_text(image.ref, "not shown: its bytes changed since submit")
    try:
        src = _thumbnail_url(fetched.url)
    except (OSError, ValueError) as exc:
        return _as_text(image.ref, f"not shown: pillow cannot shrink it ({exc})")
    title = escape(shown_ref(image.ref))
    return f'<img class="thumb" src="{src}" alt="{title}" title="{title}">'


def _listed(doc: Mapping[str, Any]) -> Iterable[tuple[str, int]]:
    review = doc.get("review") or {}
    for name in _LISTS:
        for item in (review.get(name) or {}).get("items", ()):
            if item.get("images"):
                yield str(item["decision"]), int(item.get("replicate") or 0)


def review_thumbnails(doc: Mapping[str, Any], rows: Sequence[QuestionRow],
                      policy: ImagePolicy) -> dict[tuple[str, int], str]:
    """(decision, replicate) -> the thumbnails of its images, for each listed decision with
    images; each image is fetched once."""
    wanted = set(_listed(doc))
    if not wanted:
        return {}
    made: dict[str, str] = {}
    out: dict[tuple[str, int], str] = {}
    for row in rows:
        key = (row.decision_key, row.replicate)
        if key in wanted and key not in out:
            for image in row.images:
                if image.ref not in made:
                    made[image.ref] = thumbnail_html(image, policy)
            out[key] = "".join(made[image.ref] for image in row.images)
    return out
