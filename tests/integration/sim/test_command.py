"""``dreads sim`` as a user starts it: a subprocess on a free port, labelled a simulator."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from typer.testing import CliRunner

from app.cli import app
from tests.fixtures.services import free_port


def test_sim_command_refuses_then_serves_and_labels_every_line() -> None:
    port = free_port()
    cmd = [sys.executable, "-c", "from app.cli import main; main()", "sim", "--port", str(port),
           "--down-for", "1", "--step-ms", "5", "--canvas", "160"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        result = CliRunner().invoke(app, ["check-upstream", f"http://127.0.0.1:{port}",
                                          "--timeout", "60", "--canvas", "160", "--json"])
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=20)
    assert result.exit_code == 0, result.output
    assert '"canvas_length":160' in result.stdout
    lines = [line for line in output.decode().splitlines() if line.strip()]
    assert any("SIMULATOR" in line for line in lines)
    assert lines
    assert all(line.startswith("[dreads sim]") for line in lines), lines
