"""How figures are named on screen and on the page: the field report's words, with thresholds.

The report document keys (``auc``, ``recall``, ``fp_count``, ...) stay machine names; their
titles live in the figure table (``specs.py``), with threshold slots this module fills in:
"recall >0.30", "in top 5%", "false positives >0.70", "referral band 0.30-0.70".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "column_titles",
    "run_identity",
    "thresholds",
]


def thresholds(params: Mapping[str, Any]) -> dict[str, str]:
    """The thresholds as shown: ``r`` recall, ``f`` false positives, ``t`` top share."""
    return {"r": f"{params['threshold_recall']:.2f}", "f": f"{params['threshold_fp']:.2f}",
            "t": f"{params['top_share']:.0%}"}


def column_titles(columns: Mapping[str, str], params: Mapping[str, Any]) -> list[str]:
    """The column titles with the thresholds of ``params`` filled in."""
    values = thresholds(params)
    return [t.format(**values) for t in columns.values()]


def run_identity(run: Mapping[str, Any]) -> list[str]:
    """Who answered and how: the model, the server, the settings (from the report's run)."""
    settings = run.get("settings") or {}
    fingerprint = run.get("fingerprint") or {}
    source = (f"dreads sim (the simulator) at {run.get('upstream')}" if run.get("simulator")
              else f"{run.get('engine')} at {run.get('upstream')}")
    policy = settings.get("policy")
    if policy == "fixed":
        policy = f"fixed {settings.get('fixed_draws')} draws"
    server = ", ".join(f"{k} {fingerprint[k]}" for k in ("model_id", "version",
                                                          "max_model_len", "canvas_length")
                       if fingerprint.get(k) is not None) or "not recorded"
    return [
        f"answers from {source}",
        f"model {settings.get('model')}, tokenizer {settings.get('tokenizer')}, canvas "
        f"{settings.get('canvas_length')}",
        f"{settings.get('read_mode')} reads, {settings.get('layout')} layout, policy {policy}, "
        f"threshold {settings.get('threshold')}, at most {settings.get('max_draws')} draws, "
        f"{settings.get('steps')} step(s), seed {settings.get('seed')}, "
        f"{run.get('replicates')} replicate(s)",
        f"server: {server}; settings hash {str(run.get('settings_hash'))[:12]}",
    ]
