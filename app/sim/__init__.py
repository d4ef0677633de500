"""``dreads sim``: a local server that speaks vLLM's diffusion-read protocol.

It validates requests the way vLLM does, answers with deterministic logprobs (optionally from an
answer key), models a GPU's continuous batch, and injects faults on purpose. It is always
labelled a simulator.

The names below are imported on first use, so that a part (``app.sim.key``, which ``app.runs``
reads answer keys' paths from) comes without the web server.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.sim.app import SimApp, create_app
    from app.sim.options import SimOptions
    from app.sim.server import SimHandle, run_sim_forever, start_sim_thread

__all__ = ["SimApp", "SimHandle", "SimOptions", "create_app", "run_sim_forever",
           "start_sim_thread"]

#: public name -> the module defining it
_WHERE = {"SimApp": "app", "create_app": "app", "SimOptions": "options", "SimHandle": "server",
          "run_sim_forever": "server", "start_sim_thread": "server"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'app.sim' has no attribute {name!r}")
    return getattr(import_module(f"app.sim.{_WHERE[name]}"), name)
