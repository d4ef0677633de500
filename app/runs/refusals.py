"""What a cancelled run refuses, in one set of words for every entry point: ``dreads
submit``, ``dreads run``, ``dreads resume`` and the API's ``POST /v1/runs`` and
``POST /v1/runs/{run}/resume``. A cancelled run never takes new lines and never runs again."""

from __future__ import annotations

from app.errors import RunCancelled
from app.store.records import RunInfo, RunStatus

__all__ = ["refuse_cancelled"]


def refuse_cancelled(run: RunInfo) -> None:
    """Nothing when ``run`` is not cancelled.

    Raises:
        RunCancelled: the run was cancelled (exit 2; HTTP 409).
    """
    if run.status == RunStatus.CANCELLED:
        raise RunCancelled(f"run {run.name!r} was cancelled; submit its file under a new run "
                           "name to run it again")
