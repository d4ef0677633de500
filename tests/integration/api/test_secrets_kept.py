"""Credentials in a URL are shown nowhere (issue 39, 6).

A server whose upstream, database, broker and decision endpoints all carry a password (in the
user part and as ``?password=``) is walked surface by surface: every page, ``/health``,
``/metrics``, ``/v1/models``, the run routes, an error, its log, the stored ``runs.upstream``,
the CLI's listings and a database error. ``PASSWORD`` must appear in none.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Iterator

import httpx
import orjson
import pytest
from prometheus_client import REGISTRY, generate_latest
from sqlalchemy import create_engine, text

from app.engine import redact_url, without_credentials
from app.sim import SimHandle, SimOptions, start_sim_thread
from app.telemetry import set_upstream_ready
from app.upstream.log_redaction import redact_logs
from tests.fixtures.api import ServeProcess
from tests.fixtures.services import VENV_BIN, wait_until

PASSWORD = "PASSWORD-9f3a1c"
NDJSON = {"content-type": "application/x-ndjson"}
LINES = b"".join(orjson.dumps({"id": f"q{i}", "state": f"Invoice {i} was paid late.",
                               "questions": {"late": {"type": "noul",
                                                      "instructions": "Was it paid late?"}}})
                 + b"\n" for i in range(3))


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    handle = start_sim_thread(SimOptions())
    yield handle
    handle.stop()


def with_password(url: str) -> str:
    return url.replace("://", f"://admin:{PASSWORD}@", 1)


def test_no_surface_shows_a_credential(serve_factory: Callable[..., ServeProcess],
                                       pg_url: str, sim: SimHandle) -> None:
    database = f"{pg_url}?password={PASSWORD}"
    server = serve_factory("--upstream", with_password(sim.url), "--database-url", database,
                           "--executor", "local", env={
                               "DREADS_BROKER_URL": f"redis://:{PASSWORD}@127.0.0.1:6379/0",
                               "DREADS_ANSWER_URLS": with_password("http://127.0.0.1:9/")})
    created = httpx.post(f"{server.url}/v1/runs", params={"run": "r"}, content=LINES,
                         headers=NDJSON, timeout=60)
    assert created.status_code == 201, created.text
    wait_until(lambda: httpx.get(f"{server.url}/v1/runs/r", timeout=10).json()["remaining"]
               == 0, timeout_s=60, what="the run answered")
    refused = httpx.post(f"{server.url}/v1/runs", content=LINES, headers=NDJSON, timeout=60,
                         params={"run": "e", "answer_by": "systemone",
                                 "answer_url": "http://127.0.0.1:1/"})
    assert refused.status_code == 400
    assert "http://admin:***@127.0.0.1:9/" in refused.text  # the accepted ones, redacted
    shown = [refused.text]
    for path in ("/health", "/v1/models", "/metrics", "/v1/runs", "/v1/runs/r",
                 "/v1/runs/r/results", "/runs", "/runs/r", "/runs/r/live", "/runs/r/report"):
        response = httpx.get(f"{server.url}{path}", timeout=30)
        assert response.status_code == 200, (path, response.text[:300])
        shown.append(response.text)
    assert "127.0.0.1" in httpx.get(f"{server.url}/health", timeout=10).json()["upstream"]
    shown.append(server.log_text())
    engine = create_engine(pg_url)
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT upstream, settings::text FROM runs")).all()
    engine.dispose()
    assert stored and stored[0][0] == sim.url
    shown.append(repr(stored))
    for args in (("runs", "--json"), ("status", "r", "--json"), ("export", "r")):
        result = subprocess.run([str(VENV_BIN / "dreads"), *args, "--database-url", database],
                                capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        shown += [result.stdout, result.stderr]
    closed = f"postgresql+psycopg://ops:{PASSWORD}@127.0.0.1:1/x?password={PASSWORD}"
    failed = subprocess.run([str(VENV_BIN / "dreads"), "runs", "--database-url", closed],
                            capture_output=True, text=True, timeout=120, check=False)
    assert failed.returncode != 0 and "127.0.0.1:1" in failed.stderr
    shown += [failed.stdout, failed.stderr]
    for n, text_shown in enumerate(shown):
        assert PASSWORD not in text_shown, (n, text_shown[:2000])


def test_a_worker_metric_label_and_log_line_show_no_credential(
        caplog: pytest.LogCaptureFixture) -> None:
    upstream = f"http://admin:{PASSWORD}@vllm:8001?token={PASSWORD}"
    set_upstream_ready(upstream, True)
    exported = generate_latest(REGISTRY).decode()
    assert 'dreads_upstream_ready{upstream="http://admin:***@vllm:8001?token=***"} 1.0' \
        in exported
    assert PASSWORD not in exported
    redact_logs()
    with caplog.at_level(logging.INFO):
        logging.getLogger("dreads.test").info("waiting for %s (broker %s)", upstream,
                                              f"redis://:{PASSWORD}@redis:6379/0")
    assert PASSWORD not in caplog.text
    assert "redis://:***@redis:6379/0" in caplog.text


@pytest.mark.parametrize("url", [
    f"http://admin:{PASSWORD}@h:1/v1", f"postgresql+psycopg://u:{PASSWORD}@db/x",
    f"postgresql://db/x?sslmode=require&password={PASSWORD}", f"redis://:{PASSWORD}@r:6379/0",
    f"https://h/v1?api_key={PASSWORD}&x=1", f"http://a:b@c:{PASSWORD}@h/",
])
def test_redact_and_strip(url: str) -> None:
    assert PASSWORD not in redact_url(url)
    assert PASSWORD not in redact_url(f"error: cannot reach {url}: refused")
    assert PASSWORD not in without_credentials(url)
    assert without_credentials("sim") == "sim"
