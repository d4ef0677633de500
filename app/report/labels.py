"""How figures are named on screen and on the page: the field report's words, with thresholds.

The report document keys (``auc``, ``recall``, ``fp_count``, ...) stay machine names; every
rendering (the Rich tables, the HTML page, the ``dreads run`` summary) titles them from here:
"recall >0.30", "in top 5%", "false positives >0.70", "referral band 0.30-0.70".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "CHOICE_COLUMNS",
    "NOUL_COLUMNS",
    "NOUL_RANK_COLUMNS",
    "NOUL_THRESHOLD_COLUMNS",
    "SCORE_COLUMNS",
    "column_titles",
    "run_identity",
    "thresholds",
]

#: figure name -> column title, in display order; the yes/no figures print as two tables
NOUL_RANK_COLUMNS: dict[str, str] = {
    "n": "n", "positives": "yes", "negatives": "no", "auc": "AUC",
    "top_share": "in top {t}", "rank_median_pct": "median rank %",
    "rank_worst_pct": "worst rank %",
}
NOUL_THRESHOLD_COLUMNS: dict[str, str] = {
    "recall": "recall >{r}", "fp_count": "false pos. >{f}", "fp_per_1000_neg": "FP per 1,000 no",
    "fp_per_100_states": "FP per 100 states", "referral_band": "referral band {r}-{f}",
    "ece": "ECE", "brier": "Brier",
}
NOUL_COLUMNS = {**NOUL_RANK_COLUMNS, **NOUL_THRESHOLD_COLUMNS, "unanswered": "unanswered"}
CHOICE_COLUMNS = {"n": "n", "accuracy": "accuracy", "log_loss": "log loss",
                  "unanswered": "unanswered"}
SCORE_COLUMNS = {"n": "n", "mae_level": "MAE of level", "accuracy": "top-level accuracy",
                 "unanswered": "unanswered"}


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
