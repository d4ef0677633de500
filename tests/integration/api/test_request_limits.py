"""What one request may cost a real ``dreads serve``: a state longer than the model can read is
refused from its length (quickly, in little memory, ``/health`` answering throughout), a
client's image URL on this machine is never fetched, and too many images are refused before
any is read; the same for a line of ``POST /v1/runs``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.fixtures.api import ServeProcess
from tests.fixtures.images import data_url, png
from tests.fixtures.raw_server import RawServer, dripping, http_response

QUESTIONS = {"spam": {"type": "noul", "instructions": "Is this text spam?"}}


@pytest.fixture(scope="module")
def server(module_serve_factory: Callable[..., ServeProcess]) -> ServeProcess:
    return module_serve_factory("--upstream", "sim", "--draws", "1",
                                env={"DREADS_IMAGE_MAX_COUNT": "2"})


@pytest.fixture
def listener() -> Iterator[RawServer]:
    local = RawServer(lambda conn, _: conn.sendall(http_response(png(1))))
    yield local
    local.stop()


def _peak_mib(server: ServeProcess) -> float:
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("VmHWM")).split()[1]) / 1024


def _post(server: ServeProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", content=orjson.dumps(body),
                      headers={"content-type": "application/json"}, timeout=60)


def test_a_7_mib_state_is_refused_quickly_in_little_memory_with_health_answering(
        server: ServeProcess) -> None:
    slowest = [0.0]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
            slowest[0] = max(slowest[0], time.perf_counter() - t0)
            time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    t0 = time.perf_counter()
    response = _post(server, "/v1/systemone", {"model": "jev-latest", "questions": QUESTIONS,
                                               "state": "x" * (7 * 2**20 - 100)})
    seconds = time.perf_counter() - t0
    done.set()
    poller.join()
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "its state is 7,339," in detail
    assert "more than the model can read: max_model_len 8,192 tokens" in detail
    assert seconds < 10  # tokenizing it took 27 s and 1.6 GB
    assert slowest[0] < 2.0
    assert _peak_mib(server) < 600


def test_the_decisions_route_refuses_a_long_input_the_same_way(server: ServeProcess) -> None:
    response = _post(server, "/v1/decisions", {
        "model": "dgemma", "input": "y" * 200_000,
        "questions": [{"type": "predicate", "name": "spam", "instructions": "It is spam."}]})
    assert response.status_code == 400
    assert "more than the model can read" in response.text


def test_a_client_image_url_on_this_machine_is_never_fetched(server: ServeProcess,
                                                             listener: RawServer) -> None:
    url = f"http://localhost:{listener.port}/a.png"
    response = _post(server, "/v1/systemone", {"model": "jev-latest", "questions": QUESTIONS,
                                               "state": None, "images": [url]})
    assert response.status_code == 400
    assert response.json()["detail"].startswith(f"could not fetch image URL {url!r}")
    assert listener.connections == 0


def test_too_many_images_are_refused_before_any_is_read(server: ServeProcess,
                                                        listener: RawServer) -> None:
    images = [data_url(png(1)), data_url(png(2)), f"{listener.url}/c.png"]
    response = _post(server, "/v1/systemone", {"model": "jev-latest", "questions": QUESTIONS,
                                               "state": None, "images": images})
    assert response.status_code == 400
    assert "3 images, over the limit of 2 per decision" in response.json()["detail"]
    assert listener.connections == 0


def test_a_run_upload_refuses_the_long_line_and_stores_the_rest(server: ServeProcess) -> None:
    lines = [orjson.dumps({"id": "long", "state": "z" * 1_000_000, "questions": QUESTIONS}),
             orjson.dumps({"id": "short", "state": "Win a prize", "questions": QUESTIONS})]
    response = httpx.post(f"{server.url}/v1/runs", params={"run": "long-lines"},
                          content=b"\n".join(lines) + b"\n",
                          headers={"content-type": "application/x-ndjson"}, timeout=60)
    assert response.status_code == 201
    report = response.json()
    assert (report["valid"], report["inserted"]) == (1, 1)
    [bad] = report["bad_lines"]
    assert (bad["line"], bad["id"]) == (1, "long")
    assert bad["reason"].startswith("its state is 1,000,000 characters and its longest "
                                    "instructions 18, more than the model can read")


def test_a_run_uploads_image_url_on_this_machine_is_never_fetched(
        server: ServeProcess, listener: RawServer) -> None:
    url = f"{listener.url}/a.png"
    line = orjson.dumps({"id": "local", "state": None, "images": [url],
                         "questions": QUESTIONS})
    response = httpx.post(f"{server.url}/v1/runs", params={"run": "local-image"},
                          content=line + b"\n" + orjson.dumps(
                              {"id": "text", "state": "hi", "questions": QUESTIONS}) + b"\n",
                          headers={"content-type": "application/x-ndjson"}, timeout=60)
    assert response.status_code == 201
    [rejected] = response.json()["rejected"]
    assert rejected["reason"].startswith(f"could not fetch image URL {url!r}")
    assert listener.connections == 0


def test_a_client_that_hangs_up_during_a_slow_fetch_frees_its_slot(
        serve_factory: Callable[..., ServeProcess]) -> None:
    slow = RawServer(dripping(200, 0.25))  # 50 s of image, a byte at a time
    try:
        server = serve_factory("--upstream", "sim", "--draws", "1",
                               env={"DREADS_FETCH_ALLOW": "127.0.0.0/8"})
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.url}/v1/systemone", timeout=1.5, content=orjson.dumps(
                {"model": "jev-latest", "questions": QUESTIONS, "state": None,
                 "images": [f"{slow.url}/slow.png"]}),
                headers={"content-type": "application/json"})
        assert slow.connections == 1  # the allow-list opened loopback: it was fetched
        deadline = time.monotonic() + 5
        while httpx.get(f"{server.url}/health", timeout=5).json()["in_flight"] != 0:
            assert time.monotonic() < deadline, "the slot stayed taken"
            time.sleep(0.1)
    finally:
        slow.stop()
