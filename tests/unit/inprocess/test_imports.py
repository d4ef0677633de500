"""Loading the in-process engine on a GPU machine needs neither a web server nor the simulator.

A fresh interpreter imports the engine the way ``make_upstream`` does (its factory's module) and
lists what came with it: vLLM's request rules come from ``app.engine.vllm_rules``, not from
the simulator, and no FastAPI, Starlette or uvicorn is loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.engine

#: never loaded with the engine
SERVER_SIDE = ("fastapi", "starlette", "uvicorn", "app.sim", "app.api")

_PROBE = """
import json, sys
from app.connect.engines import engine_spec
import importlib
module, _, name = engine_spec("transformers").factory.partition(":")
getattr(importlib.import_module(module), name)
from app.inprocess.engine import TransformersUpstream
print(json.dumps(sorted(sys.modules)))
"""


def test_importing_the_engine_loads_no_web_server_and_no_simulator() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "app.engine.vllm_rules" in loaded  # the rules it checks a read with
    assert not {m for m in loaded if m.startswith(SERVER_SIDE)}
