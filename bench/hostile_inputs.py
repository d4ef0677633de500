"""Hostile inputs: the peak memory (and time) of what one client or one job line can send.

    python bench/hostile_inputs.py                  # every case
    python bench/hostile_inputs.py --cases submit-5mb,systemone-7mib

Each case runs in a process of its own, whose peak resident memory (``VmHWM``, or
``ru_maxrss`` of a CLI process) is the figure:

- ``submit-5mb``, ``submit-20mb``: ``dreads submit`` of a job file whose one line has a state of
  5 MB (20 MB), next to one ordinary line, into a new SQLite store on the simulator.
- ``systemone-7mib``: ``POST /v1/systemone`` with a 7 MiB state to a ``dreads serve`` on the
  simulator, while a thread asks ``/health`` every 50 ms (its slowest answer is printed).
- ``pngs-12``: ``POST /v1/systemone`` with 12 ``file://`` PNGs of 9400 x 9400 pixels (just
  under pillow's own limit), the same server.

Prints one line per case: its peak RSS in MiB, its seconds, and what the server answered.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import psutil
from PIL import Image

QUESTIONS = {"spam": {"type": "noul", "instructions": "Is this text spam?"}}
ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREADS_")}
    env["PYTHONPATH"] = str(ROOT)
    env["DREADS_BROKER_URL"] = "redis://127.0.0.1:6379/15"  # the bench's own queue
    return env


def _line(ident: str, state: str) -> bytes:
    return orjson.dumps({"id": ident, "state": state, "questions": QUESTIONS})


def _submit(mb: int, work: Path) -> str:
    job = work / f"job-{mb}.jsonl"
    job.write_bytes(_line("big", "spam " * (mb * 1_000_000 // 5)) + b"\n"
                    + _line("small", "Win a prize now") + b"\n")
    argv = [sys.executable, "-c", "from app.cli import main; main()", "submit", str(job),
            "--run", f"big{mb}", "--upstream", "sim", "--database-url",
            f"sqlite:///{work}/s{mb}.db"]
    subprocess.run([sys.executable, "-c", "from app.cli import main; main()", "db", "upgrade",
                    "--database-url", f"sqlite:///{work}/s{mb}.db"], env=_env(),
                   capture_output=True, check=True)
    # a parent of its own: its RUSAGE_CHILDREN peak is the submit's alone
    measure = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
               "print('PEAK_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
               "file=sys.stderr); sys.exit(done.returncode)")
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", measure, *argv], env=_env(),
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    peak = next((int(line.split()[1]) for line in done.stderr.splitlines()
                 if line.startswith("PEAK_KB")), 0)
    said = " | ".join(line.strip() for line in (done.stdout + done.stderr).splitlines()[:4]
                      if not line.startswith("PEAK_KB"))
    return f"peak RSS {peak / 1024:,.0f} MiB, {seconds:.1f} s, exit {done.returncode}: {said}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Serve:
    """``dreads serve --upstream sim`` in a process of its own."""

    def __init__(self, work: Path, image_dir: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**_env(), "DREADS_IMAGE_DIRS": str(image_dir)}
        self.proc = psutil.Popen(
            [sys.executable, "-c", "from app.cli import main; main()", "serve", "--upstream",
             "sim", "--port", str(self.port), "--draws", "1",
             "--database-url", f"sqlite:///{work}/serve.db"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        raise RuntimeError("dreads serve did not start")

    def rss_mib(self) -> float:
        return float(self.proc.memory_info().rss) / 2**20

    def peak_mib(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        line = next(x for x in status.splitlines() if x.startswith("VmHWM"))
        return int(line.split()[1]) / 1024

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _post(serve: _Serve, body: dict[str, object]) -> str:
    slowest = [0.0]
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{serve.url}/health", timeout=60)
            slowest[0] = max(slowest[0], time.perf_counter() - t0)
            time.sleep(0.05)

    before = serve.rss_mib()
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    t0 = time.perf_counter()
    try:
        response = httpx.post(f"{serve.url}/v1/systemone", content=orjson.dumps(body),
                              headers={"content-type": "application/json"}, timeout=600)
        answer = f"HTTP {response.status_code} {response.text[:160]!r}"
    except httpx.HTTPError as exc:
        answer = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - t0
    stop.set()
    poller.join()
    return (f"RSS {before:,.0f} -> peak {serve.peak_mib():,.0f} MiB, {seconds:.1f} s, "
            f"slowest /health {slowest[0]:.2f} s; {answer}")


def _bomb(path: Path) -> None:
    out = io.BytesIO()
    Image.new("RGB", (9400, 9400), (20, 120, 200)).save(out, "PNG")
    path.write_bytes(out.getvalue())


def main() -> None:
    cases = ["submit-5mb", "submit-20mb", "systemone-7mib", "pngs-12"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=",".join(cases))
    chosen = parser.parse_args().cases.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        images = work / "images"
        images.mkdir()
        runs: dict[str, Callable[[], str]] = {
            "submit-5mb": lambda: _submit(5, work),
            "submit-20mb": lambda: _submit(20, work),
        }
        for name in chosen:
            if name in runs:
                print(f"{name}: {runs[name]()}", flush=True)
        if not {"systemone-7mib", "pngs-12"} & set(chosen):
            return
        serve = _Serve(work, images)
        try:
            if "systemone-7mib" in chosen:
                body = {"model": "jev-latest", "state": "x" * (7 * 2**20 - 64),
                        "questions": QUESTIONS}
                print(f"systemone-7mib: {_post(serve, body)}", flush=True)
            if "pngs-12" in chosen:
                _bomb(images / "bomb.png")
                refs = []
                for i in range(12):
                    copy = images / f"bomb{i}.png"
                    copy.write_bytes((images / "bomb.png").read_bytes())
                    refs.append(copy.as_uri())
                size = (images / "bomb.png").stat().st_size
                body = {"model": "jev-latest", "state": "Is this picture spam?",
                        "images": refs, "questions": QUESTIONS}
                print(f"pngs-12 ({size:,} bytes each): {_post(serve, body)}", flush=True)
        finally:
            serve.stop()


if __name__ == "__main__":
    main()
