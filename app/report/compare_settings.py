"""Two runs' settings side by side, the differing ones first, and what their difference
means for a comparison: a noise check (only the seed differs), one setting's effect, or a
confound (several read settings differ, so no single one can take the credit).

Input: the report's ``run`` entries (``document._run_info``): ``settings`` (the run's read
settings), ``fingerprint`` (what the server said of itself), ``upstream``, ``engine``,
``replicates``. Light: no numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from app.engine import ReadSettings

__all__ = ["READ_SETTINGS", "settings_note", "settings_side_by_side"]

#: settings that change what a read answers (an endpoint's request budget does not)
READ_SETTINGS = frozenset(f.name for f in fields(ReadSettings)) - {"answer_rps",
                                                                   "answer_concurrency"}
#: what the server says of itself that changes the answers
_SERVER_KEYS = ("model_id", "version", "max_model_len", "canvas_length")
_RUN_KEYS = ("upstream", "engine", "replicates", "simulator")


def _rows(run_a: Mapping[str, Any], run_b: Mapping[str, Any]) -> list[dict[str, Any]]:
    sa, sb = run_a.get("settings") or {}, run_b.get("settings") or {}
    fa, fb = run_a.get("fingerprint") or {}, run_b.get("fingerprint") or {}
    out = [{"name": k, "a": sa.get(k), "b": sb.get(k), "read": k in READ_SETTINGS}
           for k in [*sa, *(k for k in sb if k not in sa)]]
    out += [{"name": f"server {k}", "a": fa.get(k), "b": fb.get(k), "read": True}
            for k in _SERVER_KEYS if fa.get(k) is not None or fb.get(k) is not None]
    out += [{"name": k, "a": run_a.get(k), "b": run_b.get(k), "read": False}
            for k in _RUN_KEYS]
    for row in out:
        row["differs"] = row["a"] != row["b"]
    return out


def settings_side_by_side(run_a: Mapping[str, Any], run_b: Mapping[str, Any]
                          ) -> dict[str, Any]:
    """``{rows: [{name, a, b, differs, read}], differ: [read settings that differ, seed
    apart], seed_differs, note}``: the differing rows first (read settings before the rest),
    then the others in the run's order."""
    rows = _rows(run_a, run_b)
    rows.sort(key=lambda r: (not r["differs"], not r["read"]))
    differ = [r["name"] for r in rows if r["differs"] and r["read"] and r["name"] != "seed"]
    seed = any(r["differs"] for r in rows if r["name"] == "seed")
    return {"rows": rows, "differ": differ, "seed_differs": seed,
            "note": settings_note(differ, seed_differs=seed)}


def settings_note(differ: list[str], *, seed_differs: bool) -> str:
    """One line: what the settings' difference lets the comparison say."""
    if not differ:
        if seed_differs:
            return ("only the seed differs: this comparison is a noise check; a real "
                    "difference here is noise of the draws, not of a setting")
        return ("the read settings are the same: any difference between the runs is noise "
                "(or a change of the server outside the recorded settings)")
    if len(differ) == 1:
        return (f"one read setting differs ({differ[0]}): a real difference is that "
                "setting's effect" + (" (the seed differs too)" if seed_differs else ""))
    return (f"{len(differ)} read settings differ ({', '.join(differ)}): the difference cannot "
            "be attributed to one of them; change one at a time to tell which")
