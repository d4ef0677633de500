"""What answering through ``dreads serve`` costs: ``POST /v1/systemone`` against the simulator,
compared with answering the same decisions in-process (``app.runs.answer.answer_decision``).

    python bench/api_systemone.py                       # 2,000 requests at 8 and 64 in flight
    python bench/api_systemone.py --requests 500 --levels 1,8

Each request is one noul question on a ~600-token state, read once (``--draws 1``), so a request
is exactly one diffusion read. The simulator (``--step-ms 0``) and the server are subprocesses;
server CPU comes from ``/proc/PID/stat`` over the timed requests. The in-process figure is this
process's CPU per decision with the same reads (plan, read, fold, answer) and no HTTP in front:
the difference is what the API layer (FastAPI, validation, middleware, JSON) adds per request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine import PolicyName, ReadSettings, parse_decision
from app.runs.answer import answer_decision
from app.tokenizer.hf import load_tokenizer
from app.upstream.vllm import VllmUpstream
from tests.fixtures.api import ServeProcess
from tests.fixtures.services import VENV_BIN, free_port, wait_until
from tests.integration.durability.harness import Sim

STATE = ("Clause 4.2: The tenant shall pay the rent on the first day of each month. " * 20).strip()
QUESTION = {"type": "noul", "instructions": "Do these clauses contradict each other?"}
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Figure:
    path: str
    in_flight: int
    requests: int
    wall_s: float
    cpu_s: float  #: the server's (HTTP) or this process's (in-process)
    latencies_ms: tuple[float, ...]

    def row(self) -> str:
        ordered = sorted(self.latencies_ms)
        p50 = statistics.median(ordered)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return (f"| {self.path} | {self.in_flight} | {self.requests / self.wall_s:,.0f} | "
                f"{p50:.1f} | {p99:.1f} | {1000 * self.cpu_s / self.requests:.2f} |")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def body(i: int) -> dict[str, object]:
    return {"model": "jev-latest", "state": f"{STATE} (case {i})", "questions": {"c": QUESTION}}


async def over_http(url: str, pid: int, n: int, in_flight: int) -> Figure:
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=in_flight)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one(i: int) -> None:
            t0 = time.perf_counter()
            async with session.post(f"{url}/v1/systemone", json=body(i)) as response:
                assert response.status == 200, await response.text()
                await response.read()
            latencies.append((time.perf_counter() - t0) * 1000)

        async def worker(ids: range) -> None:
            for i in ids:
                await one(i)

        await asyncio.gather(*(worker(range(k, 2 * in_flight, in_flight))
                               for k in range(in_flight)))  # warm up
        latencies.clear()
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        await asyncio.gather(*(worker(range(k, n, in_flight)) for k in range(in_flight)))
        wall = time.perf_counter() - t0
    return Figure("HTTP /v1/systemone", in_flight, n, wall, cpu_seconds(pid) - cpu0,
                  tuple(latencies))


async def in_process(url: str, n: int, in_flight: int) -> Figure:
    tokenizer = load_tokenizer("standin")
    settings = ReadSettings(policy=PolicyName.FIXED, fixed_draws=1)
    upstream = VllmUpstream(url, model="dgemma", canvas_length=320, max_in_flight=in_flight,
                            retries=0)
    decisions = [parse_decision({"id": f"d{i}", "state": f"{STATE} (case {i})",
                                 "questions": {"c": QUESTION}}) for i in range(n)]
    latencies: list[float] = []

    async def worker(ids: range) -> None:
        for i in ids:
            t0 = time.perf_counter()
            await answer_decision(decisions[i], settings, tokenizer, upstream)
            latencies.append((time.perf_counter() - t0) * 1000)

    try:
        await asyncio.gather(*(worker(range(k, min(n, 2 * in_flight), in_flight))
                               for k in range(in_flight)))
        latencies.clear()
        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(range(k, n, in_flight)) for k in range(in_flight)))
        wall = time.perf_counter() - t0
    finally:
        await upstream.aclose()
    return Figure("in-process answer_decision", in_flight, n, wall, time.process_time() - cpu0,
                  tuple(latencies))


def start_server(sim_url: str, workdir: Path) -> ServeProcess:
    port = free_port()
    argv = [str(VENV_BIN / "dreads"), "serve", "--port", str(port), "--upstream", sim_url,
            "--draws", "1", "--database-url", f"sqlite:///{workdir / 'bench.db'}",
            "--log-level", "warning", "--max-concurrent", "1024"]
    server = ServeProcess(argv, dict(os.environ), workdir / "serve.log",
                          f"http://127.0.0.1:{port}")
    wait_until(server.healthy, timeout_s=60, what="dreads serve")
    return server


def run(n: int, levels: list[int]) -> list[Figure]:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        sim = Sim(workdir / "sim.log")
        server = start_server(sim.url, workdir)
        try:
            figures = [asyncio.run(over_http(server.url, server.pid, n, k)) for k in levels]
            figures += [asyncio.run(in_process(sim.url, n, k)) for k in levels]
        finally:
            server.stop()
            sim.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--levels", default="8,64", help="in-flight levels, comma-separated")
    args = parser.parse_args()
    figures = run(args.requests, [int(x) for x in args.levels.split(",")])
    print(f"{args.requests} one-read decisions per row, simulator --step-ms 0 in a subprocess")
    print("| path | in flight | decisions/s | p50 ms | p99 ms | CPU ms per decision |")
    print("| --- | --- | --- | --- | --- | --- |")
    for figure in figures:
        print(figure.row())


if __name__ == "__main__":
    main()
