"""What one request may ask of this server before any work is done for it: a state the model
can read (told from its length, before tokenizing) and at most ``DREADS_IMAGE_MAX_COUNT``
images; the images' own limits are checked as each is read (``app.images``)."""

from __future__ import annotations

from app.api.errors import unaskable
from app.api.state import ApiState
from app.engine import Decision
from app.images.limits import too_many_images
from app.tokenizer.limits import too_long_for

__all__ = ["refuse_oversized"]


def refuse_oversized(api: ApiState, decision: Decision) -> None:
    """Raises a 400 (one line) for a state longer than the model can read or too many
    images."""
    reason = (too_long_for(decision, api.tokenizer, api.upstream.max_model_len)
              or too_many_images(len(decision.images), api.config.images))
    if reason is not None:
        raise unaskable(f"decision {decision.id!r}: {reason}")
