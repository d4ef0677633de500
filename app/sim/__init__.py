"""``dreads sim``: a local server that speaks vLLM's diffusion-read protocol.

It validates requests the way vLLM does, answers with deterministic logprobs (optionally from an
answer key), models a GPU's continuous batch, and injects faults on purpose. It is always
labelled a simulator.
"""

from __future__ import annotations

from app.sim.app import SimApp, create_app
from app.sim.options import SimOptions
from app.sim.server import SimHandle, run_sim_forever, start_sim_thread

__all__ = ["SimApp", "SimHandle", "SimOptions", "create_app", "run_sim_forever",
           "start_sim_thread"]
