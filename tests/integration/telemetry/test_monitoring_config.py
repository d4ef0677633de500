"""The ``monitoring`` profile's Prometheus config and alert rules pass ``promtool``, and the
Grafana provisioning points at files that exist."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.fixtures.services import ROOT

PROMETHEUS = ROOT / "monitoring" / "prometheus"
GRAFANA = ROOT / "monitoring" / "grafana"
PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: apt-get install prometheus")
def test_promtool_checks_the_config_and_the_rules(tmp_path: Path) -> None:
    """As the container lays it out: the config beside the API key file it writes at start."""
    assert PROMTOOL is not None
    for name in ("prometheus.yml", "alerts.yml"):
        shutil.copy(PROMETHEUS / name, tmp_path / name)
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "api_key").write_text("k")
    out = subprocess.run([PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 rules found" in out.stdout + out.stderr


def test_prometheus_scrapes_every_part_of_the_stack() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"vllm", "dreads-worker", "dreads-api", "flower"}
    names = {n for job in jobs.values() for sd in job["dns_sd_configs"] for n in sd["names"]}
    assert names == {"vllm", "sim", "worker", "worker-sim", "api", "api-sim", "flower"}
    assert jobs["dreads-api"]["authorization"]["credentials_file"] == "secrets/api_key"


def test_grafana_provisions_the_dashboard_and_the_datasource() -> None:
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/dreads.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/etc/dreads-dashboards"
    source = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    datasource = source["datasources"][0]
    assert datasource["url"] == "http://prometheus:9090" and datasource["basicAuth"] is True
    dashboard = json.loads((GRAFANA / "dashboards/dreads.json").read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", [])}
    assert uids == {datasource["uid"]}
