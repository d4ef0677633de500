"""The API configured from DREADS_* alone: the same ServeConfig ``dreads serve`` builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.api import create_app_from_env
from app.api.config import serve_config
from app.config import Settings, settings_with
from app.connect.factory import UpstreamConfig
from app.engine import ReadSettings
from app.errors import ConfigError


def test_the_api_builds_from_the_environment(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREADS_UPSTREAM", "sim")
    monkeypatch.setenv("DREADS_DATABASE_URL", str(tmp_path / "api.db"))
    monkeypatch.setenv("DREADS_API_MAX_CONCURRENT", "7")
    app = create_app_from_env()
    with TestClient(app, base_url="http://127.0.0.1") as client:
        health = client.get("/health")
        assert health.status_code == 200, health.text
        assert health.json()["upstream"] == "sim"
        models = client.get("/v1/models").json()
    assert "dgemma" in str(models)
    assert (tmp_path / "api.db").exists()


def test_flags_win_over_the_environment_and_a_bad_executor_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREADS_CHUNK_SIZE", "8")
    env = settings_with(api_max_concurrent=3)
    config = serve_config(env, upstream="sim", settings=ReadSettings(),
                          database_url="postgresql+psycopg://x@127.0.0.1/x",
                          engine=UpstreamConfig(), chunk_size=None)
    assert (config.max_concurrent, config.chunk_size, config.executor) == (3, 8, "queue")
    with pytest.raises(ConfigError, match="DREADS_API_EXECUTOR"):
        serve_config(Settings(api_executor="nope"), upstream="sim", settings=ReadSettings(),
                     database_url="sqlite:///x.db", engine=UpstreamConfig())
