"""Fuzz ``dreads serve`` from its own OpenAPI document with schemathesis: no answer may be a 500.

Starts ``dreads serve --upstream sim`` on a SQLite file in a temporary directory, on a free
port, submits two runs (the examples) that the hooks (``bench/schemathesis_hooks.py``) address
in half the generated ``/v1/runs/{run}`` paths, runs ``schemathesis run`` against
``/openapi.json`` for a bounded time with the ``not_a_server_error`` check alone (this run is
about 500s), prints schemathesis's summary with its count of test cases, and exits with its
status (0: no 500 found). The server's log is printed when it found any.

    python bench/schemathesis_run.py --max-time 300          # 5 minutes
    python bench/schemathesis_run.py --max-time 60 --workers 1 --seed 1

Needs schemathesis (the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tool(name: str) -> str:
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} is not installed; pip install -e '.[dev]'")
    return found


def _start_serve(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DREADS_IMAGE_DIRS": str(workdir)}
    argv = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())",
            "serve", "--upstream", "sim", "--port", str(port), "--database-url",
            f"sqlite:///{workdir / 'fuzz.db'}", "--executor", "local"]
    log = (workdir / "serve.log").open("wb")
    return subprocess.Popen(argv, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"dreads serve exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"dreads serve did not answer /health within {timeout_s:g} s")


#: Runs submitted before fuzzing, which the hooks address (``schemathesis_hooks.py``).
SEEDED = ("fuzzed", "fuzzed-contracts")


def _seed_runs(url: str) -> None:
    for name, example in zip(SEEDED, ("small.jsonl", "contracts.jsonl"), strict=True):
        data = (ROOT / "examples" / example).read_bytes()
        response = httpx.post(f"{url}/v1/runs", params={"run": name}, content=data,
                              headers={"content-type": "application/x-ndjson"}, timeout=120.0)
        response.raise_for_status()


def _schemathesis(url: str, args: argparse.Namespace, workdir: Path) -> int:
    """schemathesis's exit status; it runs in ``workdir`` (its cache stays out of the tree)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "bench"),
           "SCHEMATHESIS_HOOKS": "schemathesis_hooks", "DREADS_FUZZ_RUNS": ",".join(SEEDED)}
    argv = [_tool("st"), "run", f"{url}/openapi.json", "--checks", "not_a_server_error",
            "--max-time", str(args.max_time), "--workers", str(args.workers),
            "--request-timeout", "60", "--suppress-health-check", "all",
            "--report", "junit", "--report-junit-path", str(workdir / "junit.xml"),
            "--no-color"]
    if args.seed is not None:
        argv += ["--seed", str(args.seed)]
    return subprocess.run(argv, check=False, cwd=workdir, env=env,
                          timeout=args.max_time + 300).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-time", type=int, default=300, help="seconds of fuzzing")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy the server's log and the JUnit report here")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="dreads-fuzz-"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start_serve(workdir, port)
    try:
        _wait_healthy(url, proc)
        _seed_runs(url)
        code = _schemathesis(url, args, workdir)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    log = (workdir / "serve.log").read_text(errors="replace")
    if "Traceback" in log:
        print(log[-20000:], file=sys.stderr)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        for name in ("serve.log", "junit.xml"):
            if (workdir / name).exists():
                shutil.copy(workdir / name, args.keep / name)
    shutil.rmtree(workdir, ignore_errors=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
