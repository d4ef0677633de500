"""A web page cannot write to ``dreads serve``, nor read it by DNS rebinding (issue 39, 3).

Replayed against a real server without an API key on loopback (the default): the cross-site
cancel, a ``text/plain`` submit, and reads under a foreign ``Host``.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import orjson
import pytest

from tests.fixtures.api import ServeProcess

NDJSON = {"content-type": "application/x-ndjson"}
LINE = orjson.dumps({"id": "a", "state": "I was charged twice.", "questions": {
    "billing": {"type": "noul", "instructions": "Is this about billing?"}}}) + b"\n"


@pytest.fixture(scope="module")
def server(module_serve_factory: Callable[..., ServeProcess]) -> ServeProcess:
    served = module_serve_factory("--upstream", "sim", env={
        "DREADS_ALLOWED_HOSTS": "dreads.example.org",
        "DREADS_ALLOWED_ORIGINS": "https://app.example.org"})
    created = httpx.post(f"{served.url}/v1/runs", params={"run": "victim"}, content=LINE,
                         headers=NDJSON, timeout=60)
    assert created.status_code == 201, created.text
    return served


def message(response: httpx.Response) -> str:
    return str(response.json()["detail"]["message"])


def test_a_cross_site_cancel_is_refused_and_changes_nothing(server: ServeProcess) -> None:
    refused = httpx.post(f"{server.url}/v1/runs/victim/cancel", timeout=10, headers={
        "Origin": "https://evil.example", "Content-Type": "text/plain"})
    assert refused.status_code == 403
    assert "DREADS_ALLOWED_ORIGINS" in message(refused)
    for origin in ("null", "http://127.0.0.1.evil.example"):
        assert httpx.delete(f"{server.url}/v1/runs/victim", timeout=10,
                            headers={"Origin": origin}).status_code == 403
    status = httpx.get(f"{server.url}/v1/runs/victim", timeout=10).json()
    assert status["status"] != "cancelled"


def test_a_rebinding_host_reads_nothing(server: ServeProcess) -> None:
    for path in ("/v1/runs", "/v1/runs/victim/results", "/runs", "/metrics", "/docs"):
        refused = httpx.get(f"{server.url}{path}", headers={"Host": "rebind.evil.example"},
                            timeout=10)
        assert refused.status_code == 400, path
        assert "DREADS_ALLOWED_HOSTS" in message(refused)
        assert "victim" not in refused.text
    cancel = httpx.post(f"{server.url}/v1/runs/victim/cancel", timeout=10,
                        headers={"Host": "evil.example", "Origin": "http://evil.example"})
    assert cancel.status_code == 400
    # liveness probes reach /health by the pod's address, whatever the name
    assert httpx.get(f"{server.url}/health", headers={"Host": "10.1.2.3:8000"},
                     timeout=10).status_code == 200


def test_text_plain_and_form_bodies_are_refused(server: ServeProcess) -> None:
    for kind in ("text/plain", "application/x-www-form-urlencoded"):
        refused = httpx.post(f"{server.url}/v1/runs", params={"run": "plain"}, content=LINE,
                             headers={"content-type": kind}, timeout=10)
        assert refused.status_code == 415, kind
        assert "application/x-ndjson" in message(refused)
        one = httpx.post(f"{server.url}/v1/systemone", content=b"{}", timeout=10,
                         headers={"content-type": kind})
        assert one.status_code == 415
    assert httpx.get(f"{server.url}/v1/runs/plain", timeout=10).status_code == 404


def test_own_pages_configured_names_and_plain_clients_still_write(server: ServeProcess) -> None:
    port = server.url.rsplit(":", 1)[1]
    cases = [
        {"Origin": server.url, "content-type": "application/x-ndjson"},
        {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}", **NDJSON},
        {"Origin": "https://app.example.org", **NDJSON},
        {"Host": "dreads.example.org", **NDJSON},
        {"content-type": "text/plain", "X-Dreads-Client": "1"},
    ]
    for n, headers in enumerate(cases):
        response = httpx.post(f"{server.url}/v1/runs", params={"run": f"ok{n}"}, content=LINE,
                              headers=headers, timeout=60)
        assert response.status_code == 201, (headers, response.text)
    files = {"file": ("jobs.jsonl", LINE, "application/octet-stream")}
    upload = httpx.post(f"{server.url}/v1/runs", params={"run": "multipart"}, files=files,
                        timeout=60)
    assert upload.status_code == 201, upload.text
    assert httpx.post(f"{server.url}/v1/runs/ok0/cancel", timeout=10).status_code == 200
