"""The operator's answer key goes to its own server only, and a run names no other server
over HTTP (issue 39, 2).

A local listener stands for a server a client would like to reach: it records every request's
headers and answers an HTML page. The server under test has ``DREADS_ANSWER_API_KEY`` for
another ``dreads serve`` (``DREADS_ANSWER_URL``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import orjson
import pytest

from tests.fixtures.api import ServeProcess
from tests.fixtures.services import wait_until

KEY = "sk-OPERATOR-0123456789abcdef"
NDJSON = {"content-type": "application/x-ndjson"}
PAGE = b"<html><title>Flower</title>SECRET-PAGE-CONTENT</html>"
LINES = b"".join(orjson.dumps({"id": f"q{i}", "state": f"Invoice {i} was paid late.",
                               "questions": {"late": {"type": "noul",
                                                      "instructions": "Was it paid late?"}}})
                 + b"\n" for i in range(3))


class Listener:
    """An HTTP server on loopback that records what it is sent and answers ``PAGE``."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        seen = self.headers

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                seen.append({k.lower(): v for k, v in self.headers.items()})
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                self.send_response(400)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(PAGE)))
                self.end_headers()
                self.wfile.write(PAGE)

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


def test_a_client_cannot_send_the_key_or_a_run_elsewhere(
        serve_factory: Callable[..., ServeProcess], listener: Listener) -> None:
    endpoint = serve_factory("--upstream", "sim", env={"DREADS_API_KEY": KEY})
    server = serve_factory("--upstream", "sim", env={
        "DREADS_API_KEY": "another-key-0123456789", "DREADS_ANSWER_API_KEY": KEY,
        "DREADS_ANSWER_URL": endpoint.url, "DREADS_ANSWER_URLS": listener.url})
    auth = {"Authorization": "Bearer another-key-0123456789", **NDJSON}
    refused = httpx.post(f"{server.url}/v1/runs", content=LINES, headers=auth, timeout=60,
                         params={"run": "r", "answer_by": "systemone",
                                 "answer_url": "http://127.0.0.1:5555/"})
    assert refused.status_code == 400
    assert "DREADS_ANSWER_URLS" in refused.json()["detail"]["message"]
    # a listed endpoint may answer the run, but without the operator's key
    listed = httpx.post(f"{server.url}/v1/runs", content=LINES, headers=auth, timeout=60,
                        params={"run": "listed", "answer_by": "systemone",
                                "answer_url": listener.url, "model": "m"})
    assert listed.status_code == 201, listed.text
    wait_until(lambda: len(listener.headers) >= 3, timeout_s=60, what="the listener asked")
    assert all("authorization" not in h for h in listener.headers)
    # its error page is not read back through the run
    def shown() -> str:
        status = httpx.get(f"{server.url}/v1/runs/listed", headers=auth, timeout=10).text
        results = httpx.get(f"{server.url}/v1/runs/listed/results", headers=auth, timeout=10)
        return status + results.text

    wait_until(lambda: "rejected the decision" in shown(), timeout_s=60,
               what="the listener's refusal recorded")
    assert "SECRET-PAGE" not in shown() and "Flower" not in shown()
    # the key's own server gets it, by default
    own = httpx.post(f"{server.url}/v1/runs", content=LINES, headers=auth, timeout=60,
                     params={"run": "own", "answer_by": "systemone"})
    assert own.status_code == 201, own.text
    assert own.json()["links"]
    wait_until(lambda: httpx.get(f"{server.url}/v1/runs/own", headers=auth,
                                 timeout=10).json()["remaining"] == 0,
               timeout_s=90, what="the run answered by the key's server")
    assert httpx.get(f"{server.url}/v1/runs/own", headers=auth,
                     timeout=10).json()["counts"] == {"done": 3}
