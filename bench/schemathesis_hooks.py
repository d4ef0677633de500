"""schemathesis hooks of ``bench/schemathesis_run.py`` (loaded through ``SCHEMATHESIS_HOOKS``):
half the generated run names of ``/v1/runs/{run}...`` are replaced with the runs the script
submitted first, so status, results, resume and cancel are fuzzed on real runs, not only 404s.
``DELETE`` keeps its generated names (the seeded runs stay for the whole run)."""

from __future__ import annotations

import os
from typing import Any

import schemathesis
from hypothesis import strategies as st

#: The runs the script submitted before fuzzing (comma-separated).
SEEDED = tuple(n for n in os.environ.get("DREADS_FUZZ_RUNS", "").split(",") if n)


@schemathesis.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any]) -> Any:
    operation = context.operation
    if (not SEEDED or "run" not in (path_parameters or {})
            or operation is None or operation.method.upper() == "DELETE"):
        return st.just(path_parameters)
    return st.sampled_from([path_parameters, *({**path_parameters, "run": name}
                                               for name in SEEDED)])
