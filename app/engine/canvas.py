"""Canvas widths: a canvas holds its content, the turn close and at least one pad row, rounded
up to the canvas step and capped at the served canvas (every layout)."""

from __future__ import annotations

__all__ = ["canvas_width"]


def canvas_width(n_ids: int, *, step: int, cap: int) -> int | None:
    """The smallest multiple of ``step`` holding ``n_ids``, capped at ``cap``.

    Returns None when ``n_ids`` exceeds ``cap`` (the template does not fit).
    """
    if n_ids > cap:
        return None
    return min(-(-n_ids // step) * step, cap)
