"""Client CPU per read of ``VllmUpstream`` (aiohttp) against ``dreads sim`` in another process,
compared with a plain httpx ``AsyncClient``.

    python bench/client_cpu.py                  # 3,000 reads at 1, 8, 64 and 256 in flight
    python bench/client_cpu.py --reads 500 --levels 1,64

Client CPU is this process's CPU time (``time.process_time``) over the reads, divided by the
number of reads: it includes building nothing (bodies are built before timing), sending,
receiving and ``parse_response``. The simulator runs with ``--step-ms 0`` in a subprocess, so its
CPU is not counted. The budget (design.md) is <= 0.5 ms per read at 64+ in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine import ReadRequest, ReadSettings, encode_body, parse_decision, plan_decision
from app.engine.wire import build_request, parse_response
from app.tokenizer.hf import load_tokenizer
from app.upstream.vllm import VllmUpstream
from tests.integration.durability.harness import Sim

STATE = ("Clause 4.2: The tenant shall pay the rent on the first day of each month. " * 20).strip()


@dataclass(frozen=True)
class Figure:
    client: str
    in_flight: int
    reads: int
    wall_s: float
    cpu_s: float

    @property
    def reads_per_s(self) -> float:
        return self.reads / self.wall_s

    @property
    def cpu_ms_per_read(self) -> float:
        return 1000.0 * self.cpu_s / self.reads


@contextmanager
def simulator(step_ms: float = 0.0) -> Iterator[str]:
    """``dreads sim`` in a subprocess on a free port; stopped on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        sim = Sim(Path(tmp) / "sim.log", "--step-ms", str(step_ms))
        try:
            yield sim.url
        finally:
            sim.stop()


def build_requests(n: int) -> list[ReadRequest]:
    """``n`` distinct diffusion-read requests (a ~600-token chat body each)."""
    tokenizer = load_tokenizer("standin")
    settings = ReadSettings()
    decision = parse_decision({"id": "bench", "state": STATE, "questions": {
        "c": {"type": "noul", "instructions": "Do these clauses contradict each other?"}}})
    unit = plan_decision(decision, settings, tokenizer).units[0]
    return [build_request(unit, settings, draw=i, seed=i, vocab_size=tokenizer.info.vocab_size)
            for i in range(n)]


async def _drive(send: Callable[[ReadRequest], Awaitable[object]],
                 requests: Sequence[ReadRequest], in_flight: int) -> None:
    queue = iter(requests)

    async def worker() -> None:
        for request in queue:
            await send(request)

    await asyncio.gather(*(worker() for _ in range(in_flight)))


async def _measure(name: str, send: Callable[[ReadRequest], Awaitable[object]],
                   requests: Sequence[ReadRequest], in_flight: int) -> Figure:
    await _drive(send, requests[:min(len(requests), in_flight * 2)], in_flight)  # warm pool
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await _drive(send, requests, in_flight)
    return Figure(name, in_flight, len(requests), time.perf_counter() - wall0,
                  time.process_time() - cpu0)


async def bench_vllm_upstream(url: str, requests: Sequence[ReadRequest],
                              in_flight: int) -> Figure:
    upstream = VllmUpstream(url, model="dgemma", canvas_length=320, max_in_flight=in_flight,
                            retries=0)
    try:
        return await _measure("VllmUpstream (aiohttp)", upstream.read, requests, in_flight)
    finally:
        await upstream.aclose()


async def bench_httpx(url: str, requests: Sequence[ReadRequest], in_flight: int) -> Figure:
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60.0) as client:
        async def send(request: ReadRequest) -> object:
            for attempt in range(3):  # a reset keep-alive connection: retry, as a client would
                try:
                    response = await client.post(
                        "/v1/chat/completions", content=encode_body(request.body),
                        headers={"content-type": "application/json"})
                    break
                except httpx.TransportError:
                    if attempt == 2:
                        raise
            response.raise_for_status()
            return parse_response(request.endpoint, orjson.loads(response.content),
                                  request.slots)

        return await _measure("httpx AsyncClient, one pool", send, requests, in_flight)


def run(reads: int, levels: Sequence[int], clients: Sequence[str]) -> list[Figure]:
    requests = build_requests(reads)
    figures: list[Figure] = []
    benches = {"aiohttp": bench_vllm_upstream, "httpx": bench_httpx}
    with simulator() as url:
        for client in clients:
            for in_flight in levels:
                figure = asyncio.run(benches[client](url, requests, in_flight))
                print(_table([figure]).splitlines()[-1], flush=True)
                figures.append(figure)
    return figures


def _table(figures: Sequence[Figure]) -> str:
    lines = ["| client | in flight | reads | reads/s | client CPU per read |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {f.client} | {f.in_flight} | {f.reads:,} | {f.reads_per_s:,.0f} | "
              f"{f.cpu_ms_per_read:.3f} ms |" for f in figures]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=3000)
    parser.add_argument("--levels", default="1,8,64,256", help="in-flight levels, comma-separated")
    parser.add_argument("--clients", default="aiohttp,httpx")
    parser.add_argument("--budget-ms", type=float, default=0.5)
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]
    figures = run(args.reads, levels, args.clients.split(","))
    print(f"{os.cpu_count()} CPUs; simulator in a separate process with --step-ms 0\n")
    print(_table(figures))
    over = [f for f in figures if f.client.startswith("VllmUpstream") and f.in_flight >= 64
            and f.cpu_ms_per_read > args.budget_ms]
    verdict = "over" if over else "within"
    print(f"\nVllmUpstream at 64+ in flight: {verdict} the {args.budget_ms} ms/read budget")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
