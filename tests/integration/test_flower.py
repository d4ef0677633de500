"""``dreads flower``: basic authentication always on, and the dreads tasks visible by run/chunk.

The end-to-end test runs a private Redis, a migrated PostgreSQL database, the simulator, a real
``celery -A workers.celery_app worker`` and ``dreads flower`` as subprocesses, submits a small
run and reads Flower's API.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from app.cli import app
from app.cli.flower import is_loopback, resolve_flower_auth
from app.config import get_settings
from app.errors import ConfigError
from app.sim import SimOptions, start_sim_thread
from tests.fixtures.services import RedisServer, WorkerProcess, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
DREADS = str(Path(sys.executable).parent / "dreads")
SMALL = ROOT / "examples" / "small.jsonl"
SMALL_KEY = ROOT / "examples" / "small.key.jsonl"


# -------------------------------------------------------------------- the policy (no services)


@pytest.mark.parametrize(("address", "expected"), [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("127.0.0.2", True),
    ("0.0.0.0", False), ("", False), ("10.0.0.5", False), ("flower.example", False),
])
def test_loopback_addresses(address: str, expected: bool) -> None:
    assert is_loopback(address) is expected


@pytest.mark.parametrize(("basic_auth", "address", "insecure", "error"), [
    (None, "127.0.0.1", False, "needs credentials"),
    ("", "0.0.0.0", False, "needs credentials"),
    (None, "0.0.0.0", True, "only allowed on a loopback address"),
    ("admin:changethis", "127.0.0.1", False, "placeholder"),
    ("admin:admin", "127.0.0.1", False, "placeholder"),
    ("ops:s3cret-pw,dev:password", "127.0.0.1", False, "placeholder"),
    ("opsonly", "127.0.0.1", False, "user:password"),
    ("ops:", "127.0.0.1", False, "user:password"),
    ("ops:x", "0.0.0.0", False, "has 1 characters; on 0.0.0.0 it needs at least 16"),
    ("ops:s3cret-pw-long-enough,dev:short", "10.0.0.5", False, "user 'dev' has 5 characters"),
    ("admin:changethis", "0.0.0.0", True, "at least 16"),
])
def test_refused_configurations(basic_auth: str | None, address: str, insecure: bool,
                                error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        resolve_flower_auth(basic_auth, address=address, insecure=insecure)


def test_accepted_configurations() -> None:
    auth = resolve_flower_auth("ops:s3cret-pw-0123456, dev:an0ther-pw-0123456",
                               address="0.0.0.0", insecure=False)
    assert auth.credentials == ("ops:s3cret-pw-0123456", "dev:an0ther-pw-0123456")
    assert auth.users == ("ops", "dev")
    assert resolve_flower_auth("ops:s3cret-pw", address="127.0.0.1", insecure=False).enabled
    assert resolve_flower_auth("admin:changethis", address="127.0.0.1", insecure=True).enabled
    assert not resolve_flower_auth(None, address="127.0.0.1", insecure=True).enabled


@pytest.mark.parametrize(("args", "env", "error"), [
    ([], {}, "--basic-auth"),
    (["--basic-auth", "admin:changethis"], {}, "placeholder"),
    ([], {"DREADS_FLOWER_BASIC_AUTH": "admin:admin"}, "placeholder"),
    (["--insecure", "--address", "0.0.0.0"], {}, "loopback"),
    (["--basic-auth", "ops:s3cret-pw", "--auth=.*@example.com"], {}, "--basic-auth"),
])
def test_command_refuses_to_start(args: list[str], env: dict[str, str], error: str,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["flower", *args])
    assert result.exit_code == 2
    assert error in " ".join(result.output.split())


# -------------------------------------------------------------------- end to end


class FlowerProcess(WorkerProcess):
    """``dreads flower`` on a free port, in its own process group (stopped with it)."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__([DREADS, "flower", "--port", str(self.port), "--address", "127.0.0.1",
                          *args], {**os.environ, **env}, log_path)

    def wait_listening(self, timeout_s: float = 60) -> None:
        def listening() -> bool:
            assert self.alive(), self.log_text()
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{self.url}/healthcheck", timeout=2)
                return True
            return False

        wait_until(listening, timeout_s=timeout_s, what="Flower to listen", interval_s=0.5)


@pytest.fixture
def flower_factory(tmp_path: Path) -> Iterator[Callable[..., FlowerProcess]]:
    started: list[FlowerProcess] = []

    def start(args: list[str], env: dict[str, str]) -> FlowerProcess:
        """Start one; call ``wait_listening()`` before using it (so several start at once)."""
        flower = FlowerProcess(args, env, tmp_path / f"flower{len(started)}.log")
        started.append(flower)
        return flower

    yield start
    for flower in started:
        flower.stop()


@pytest.fixture
def sim_url() -> Iterator[str]:
    handle = start_sim_thread(SimOptions(key_path=str(SMALL_KEY), seed=3))
    try:
        yield handle.url
    finally:
        handle.stop()


def _submit(run: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``dreads submit`` in this process (its imports are already paid for)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["submit", str(SMALL), "--run", run])
    get_settings.cache_clear()
    assert result.exit_code == 0, result.output


def _get(flower: FlowerProcess, path: str, auth: tuple[str, str] | None) -> httpx.Response:
    return httpx.get(f"{flower.url}{path}", auth=auth, timeout=30)


def _json(flower: FlowerProcess, path: str, auth: tuple[str, str]) -> dict[str, Any]:
    """The JSON body of a 200 answer, else {} (Flower answers 503 while inspect fails)."""
    response = _get(flower, path, auth)
    return response.json() if response.status_code == 200 else {}


def _tasks_done(flower: FlowerProcess, auth: tuple[str, str], n: int) -> dict[str, Any]:
    tasks = _json(flower, "/api/tasks?taskname=reads.run_chunk", auth)
    done = {k: t for k, t in tasks.items() if t.get("state") == "SUCCESS"}
    return done if len(done) >= n else {}


@pytest.mark.slow
def test_flower_lists_the_worker_and_the_dreads_tasks(
    redis_server: RedisServer, pg_url: str, sim_url: str, monkeypatch: pytest.MonkeyPatch,
    worker_factory: Callable[..., WorkerProcess], flower_factory: Callable[..., FlowerProcess],
) -> None:
    password = uuid.uuid4().hex
    auth = ("ops", password)
    env = {"DREADS_BROKER_URL": redis_server.url, "DREADS_DATABASE_URL": pg_url,
           "DREADS_UPSTREAM": sim_url, "DREADS_TOKENIZER": "standin", "DREADS_CHUNK_SIZE": "2"}
    worker = worker_factory(env, celery=True, concurrency=1)  # all three start at once
    flower = flower_factory([], {**env, "DREADS_FLOWER_BASIC_AUTH": f"ops:{password}"})
    open_flower = flower_factory(["--insecure"], {"DREADS_BROKER_URL": redis_server.url})
    flower.wait_listening()
    for path in ("/api/workers", "/api/tasks"):
        assert _get(flower, path, None).status_code == 401
        assert _get(flower, path, ("ops", "wrong")).status_code == 401
    open_flower.wait_listening()
    assert _get(open_flower, "/api/workers", None).status_code == 200, "--insecure on loopback"

    prefix = worker.args[worker.args.index("-n") + 1].split("@")[0] + "@"
    name = wait_until(lambda: [w for w in _json(flower, "/api/workers?refresh=1", auth)
                               if w.startswith(prefix)], timeout_s=120,
                      what="the worker in /api/workers", interval_s=0.5)
    run = f"flower-{uuid.uuid4().hex[:6]}"
    _submit(run, env, monkeypatch)
    done = wait_until(lambda: _tasks_done(flower, auth, 3), timeout_s=120,
                      what="3 finished reads.run_chunk tasks", interval_s=0.5)
    args = sorted(t["args"] for t in done.values())
    assert args == [f"run={run} chunk=1 (2 decisions)", f"run={run} chunk=2 (2 decisions)",
                    f"run={run} chunk=3 (1 decision)"], args
    assert {t["worker"] for t in done.values()} == set(name)
