"""The fingerprint's batch invariance over real HTTP: observed from the simulator's
``/server_info``, declared for a vLLM that does not serve it (no development mode)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from app.cli import app
from app.upstream.vllm import VllmUpstream
from tests.fixtures.sim import MakeSim

#: vLLM's answers to the control plane; ``/server_info`` only in its development mode.
_MODELS = {"object": "list", "data": [{"id": "dgemma", "max_model_len": 8192}]}
Serve = Callable[[dict[str, Any] | None], str]


@pytest.fixture
def vllm_like() -> Iterator[Serve]:
    """``serve(server_info)``: the URL of a stand-in for vLLM's GET routes (``server_info``:
    the ``/server_info`` body, None: not served, as without ``VLLM_SERVER_DEV_MODE=1``)."""
    servers: list[ThreadingHTTPServer] = []

    def serve(server_info: dict[str, Any] | None) -> str:
        routes = {"/v1/models": _MODELS, "/version": {"version": "0.33.0"}}
        if server_info is not None:
            routes["/server_info"] = server_info

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = routes.get(self.path.split("?")[0])
                data = json.dumps(body or {"detail": "Not Found"}).encode()
                self.send_response(404 if body is None else 200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


async def _fingerprint(url: str, declared: bool | None) -> tuple[bool | None, str | None]:
    upstream = VllmUpstream(url, model="dgemma", canvas_length=320, batch_invariant=declared)
    try:
        fp = await upstream.fingerprint()
    finally:
        await upstream.aclose()
    return fp.batch_invariant, fp.batch_invariant_from


async def test_the_simulator_says_it_is_batch_invariant(make_sim: MakeSim) -> None:
    sim = make_sim()
    assert await _fingerprint(sim.url, None) == (True, "observed")
    assert await _fingerprint(sim.url, False) == (True, "observed")


@pytest.mark.parametrize(("declared", "expected"), [
    (True, (True, "declared")), (False, (False, "declared")), (None, (None, None))])
async def test_without_server_info_the_declaration_is_recorded(
        vllm_like: Serve, declared: bool | None, expected: tuple[bool | None, str | None]) -> None:
    assert await _fingerprint(vllm_like(None), declared) == expected


async def test_vllm_in_development_mode_is_observed(vllm_like: Serve) -> None:
    url = vllm_like({"vllm_config": "...", "vllm_env": {"VLLM_BATCH_INVARIANT": False}})
    assert await _fingerprint(url, True) == (False, "observed")


def test_check_upstream_shows_it(make_sim: MakeSim) -> None:
    sim = make_sim()
    runner = CliRunner()
    table = runner.invoke(app, ["check-upstream", sim.url], env={"COLUMNS": "120"})
    assert table.exit_code == 0, table.output
    assert "batch invariant" in table.output and "yes (observed)" in table.output
    doc = orjson.loads(runner.invoke(app, ["check-upstream", sim.url, "--json"]).stdout)
    assert doc["fingerprint"]["batch_invariant"] is True
    assert doc["fingerprint"]["batch_invariant_from"] == "observed"
