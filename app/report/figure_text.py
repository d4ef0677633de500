"""A figure with its interval as text, worded once for the terminal, the page and the headline.

AUC ``0.9643 [0.951, 0.976]``; a rate ``37/76 (48.7%, 95% CI 37.8-59.7%)`` (in tables
``37/76 48.7% [37.8-59.7%]``); with replicates the draw noise is named apart:
``0.9705 [0.951, 0.987] (draw noise ± 0.0031 over 5 replicates)``. The in-top share carries its
best possible value: ``22/90 (24.4%, ...), the most possible at 5% of 443``. Light: no scipy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.engine import Family
from app.report import specs
from app.report.specs import FigureKind

__all__ = ["cell_text", "interval_text", "noise_text", "num", "partial_line", "rate_text",
           "top_cap_text", "value_text"]


def num(value: Any, digits: int = 4) -> str:
    """A number as text: ints plain, floats to ``digits`` significant digits; "-" for None."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer() and abs(value) >= 10:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def _bound(value: float, digits: int) -> str:
    return f"{value:.{digits}g}"


def interval_text(interval: Mapping[str, Any] | None, digits: int = 3) -> str:
    """``[low, high]``, or "" when the figure has none."""
    if not interval or interval.get("low") is None or interval.get("high") is None:
        return ""
    return f"[{_bound(interval['low'], digits)}, {_bound(interval['high'], digits)}]"


def _pct(value: float) -> str:
    return f"{value * 100:.3g}"


def rate_text(k: Any, n: Any, share: Any, interval: Mapping[str, Any] | None) -> str:
    """``37/76 (48.7%, 95% CI 37.8-59.7%)``; ``0/0 (-)`` without items."""
    if share is None:
        return f"{num(k)}/{num(n)} (-)"
    text = f"{num(k)}/{num(n)} ({_pct(share)}%"
    if interval and interval.get("low") is not None and interval.get("high") is not None:
        level = round(float(interval.get("level") or 0.95) * 100)
        text += f", {level}% CI {_pct(interval['low'])}-{_pct(interval['high'])}%"
    return text + ")"


def top_cap_text(figures: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """The in-top share's best possible: "the most possible at 5% of 443" when reached, else
    "cap 22 at 5% of 443"."""
    cap, hits, n = figures.get("top_share_cap"), figures.get("top_share_hits"), figures.get("n")
    if cap is None or n is None:
        return ""
    share = f"{params['top_share']:.0%}"
    if hits == cap:
        return f"the most possible at {share} of {n}"
    return f"cap {cap} at {share} of {n}"


def _sd(family: Family, block: Mapping[str, Any], key: str) -> str:
    """The draw noise of ``key`` as text ("0.0031", "2.9%" for a share), "" when none."""
    sd = (block.get("draw_sd") or {}).get(key)
    if not isinstance(sd, float) or abs(sd) < 1e-12:
        return ""
    s = specs.spec(family, key)
    if s.kind is FigureKind.RATE and s.scale == 1.0:
        return f"{sd * 100:.2g}%"
    return f"{sd:.2g}"


def noise_text(family: Family, block: Mapping[str, Any], key: str) -> str:
    """``draw noise ± 0.0031 over 5 replicates``, "" without replicates."""
    sd = _sd(family, block, key)
    return f"draw noise ± {sd} over {block.get('replicates')} replicates" if sd else ""


def value_text(family: Family, key: str, block: Mapping[str, Any],
               params: Mapping[str, Any] | None = None, digits: int = 4) -> str:
    """One figure of a BLOCK in words: value, interval, draw noise (the headline's form)."""
    s = specs.spec(family, key)
    figures = block["figures"]
    interval = (block.get("intervals") or {}).get(key)
    value = figures.get(key)
    if s.kind is FigureKind.RATE and s.scale == 1.0:
        text = rate_text(figures.get(s.hits or ""), figures.get(s.total or ""), value, interval)
    else:
        text = num(value, digits)
        bounds = interval_text(interval)
        text += f" {bounds}" if bounds and value is not None else ""
    if key == "top_share" and params:
        cap = top_cap_text(figures, params)
        text += f", {cap}" if cap else ""
    noise = noise_text(family, block, key)
    return f"{text} ({noise})" if noise else text


def cell_text(family: Family, key: str, block: Mapping[str, Any],
              params: Mapping[str, Any] | None = None) -> str:
    """One figure of a BLOCK for a table cell: ``value [low, high]``, rates with their counts
    (``37/76 48.7% [37.8-59.7%]``), ``± sd`` of draw noise with replicates."""
    s = specs.spec(family, key)
    figures = block["figures"]
    value = figures.get(key)
    interval = (block.get("intervals") or {}).get(key) or {}
    low, high = interval.get("low"), interval.get("high")
    if s.kind is FigureKind.RATE and s.scale == 1.0 and value is not None:
        text = f"{num(figures.get(s.hits or ''))}/{num(figures.get(s.total or ''))} " \
               f"{_pct(value)}%"
        if low is not None and high is not None:
            text += f" [{_pct(low)}-{_pct(high)}%]"
        if key == "top_share" and figures.get("top_share_cap") is not None:
            text += f" cap {figures['top_share_cap']}"
    else:
        text = num(value)
        if value is not None and low is not None and high is not None:
            text += f" [{_bound(low, 3)}, {_bound(high, 3)}]"
    sd = _sd(family, block, key)
    return f"{text} ±{sd}" if sd else text


def partial_line(partial: Mapping[str, Any] | None, *,
                 then: str = "figures will change as the rest are answered") -> str:
    """``partial: 64 of 313 decisions settled; {then}`` ("" for a settled run)."""
    if not partial:
        return ""
    return f"partial: {partial['settled']} of {partial['decisions']} decisions settled; {then}"
