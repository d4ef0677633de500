"""``VllmUpstream`` against the simulator over real HTTP: bodies, retries, error mapping."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time

import orjson
import pytest

from app.engine import Endpoint, ReadSettings, build_probe_request, encode_body
from app.engine.wire import FORBIDDEN_FIELDS
from app.errors import (
    MalformedResponse,
    UpstreamRejected,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)
from app.sim.faults import FaultPlan, FaultRates
from app.tokenizer.hf import HFTextTokenizer
from app.upstream.vllm import VllmUpstream
from tests.fixtures.sim import MakeSim
from tests.integration.upstream.conftest import NOUL, decision_obj, flow, request


def _client(url: str, **kwargs: object) -> VllmUpstream:
    kwargs.setdefault("backoff_s", 0.01)
    return VllmUpstream(url, model="dgemma", canvas_length=320, **kwargs)  # type: ignore[arg-type]


async def test_a_repeated_read_sends_a_byte_identical_body(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim(fail_rate=1.0)  # the first delivery fails: the retry must be identical too
    upstream = _client(sim.url)
    req = request(standin_tokenizer)
    await upstream.read(req)
    await upstream.read(req)
    await upstream.aclose()
    assert len(sim.bodies) == 3
    assert len(set(sim.bodies)) == 1
    assert sim.bodies[0] == encode_body(req.body)


@pytest.mark.parametrize("endpoint", [Endpoint.CHAT, Endpoint.COMPLETIONS])
async def test_forbidden_sampling_fields_are_never_sent(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer, endpoint: Endpoint) -> None:
    sim = make_sim()
    upstream = _client(sim.url)
    settings = ReadSettings(endpoint=endpoint, steps=2)
    obj = decision_obj(0, c=NOUL, k={"type": "choice", "instructions": "Which party pays?",
                                     "criteria": {"tenant": None, "landlord": "the owner"}},
                       s={"type": "score", "instructions": "How clear?",
                          "criteria": ["vague", "clear", "precise"]})
    f = flow(standin_tokenizer, obj, settings)
    while not f.done:
        requests = f.next_requests()
        for req, res in zip(requests, await asyncio.gather(*map(upstream.read, requests)),
                            strict=True):
            f.record(req, res)
    await upstream.aclose()
    assert sim.bodies
    for raw in sim.bodies:
        assert not FORBIDDEN_FIELDS & set(orjson.loads(raw))
    assert sim.stats()["rejected"] == 0


async def test_a_400_is_not_retried_and_carries_vllms_message(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim()
    upstream = _client(sim.url, retries=4)
    req = request(standin_tokenizer)
    bad = dataclasses.replace(req, body={**req.body, "seed": 42})
    with pytest.raises(UpstreamRejected) as info:
        await upstream.read(bad)
    await upstream.aclose()
    assert info.value.kind == "bad_request"
    assert info.value.status == 400
    assert info.value.param is None  # vLLM names the forbidden fields in one message
    assert "not yet supported with diffusion models" in info.value.message
    assert sim.stats()["requests"] == 1


async def test_a_500_is_retried(make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim(fail_rate=1.0)
    upstream = _client(sim.url, retries=2)
    result = await upstream.read(request(standin_tokenizer))
    await upstream.aclose()
    assert result.rows
    stats = sim.stats()
    assert (stats["requests"], stats["reads"], stats["faults"]["fail"]) == (2, 1, 1)


async def test_5xx_past_the_retries_is_a_server_error(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim()
    sim.down(60)
    upstream = _client(sim.url, retries=2)
    with pytest.raises(UpstreamUnavailable) as info:
        await upstream.read(request(standin_tokenizer))
    await upstream.aclose()
    assert (info.value.kind, info.value.status) == ("server_error", 503)
    assert sim.stats()["down_503"] == 3


async def test_an_outage_mid_run_is_ridden_out(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim()
    upstream = _client(sim.url, retries=6, backoff_s=0.1)
    await upstream.read(request(standin_tokenizer, i=0))
    sim.down(0.5)
    result = await upstream.read(request(standin_tokenizer, i=1))
    await upstream.aclose()
    assert result.rows
    assert sim.stats()["down_503"] >= 1


def _refusing_port() -> tuple[socket.socket, str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_connection_refused_is_unreachable(standin_tokenizer: HFTextTokenizer) -> None:
    sock, url = _refusing_port()
    upstream = _client(url, retries=1)
    try:
        with pytest.raises(UpstreamUnavailable) as info:
            await upstream.read(request(standin_tokenizer))
    finally:
        await upstream.aclose()
        sock.close()
    assert info.value.kind == "upstream_unreachable"
    assert "running" in info.value.message


async def test_a_hang_times_out_and_the_retry_succeeds(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim(hang_rate=1.0)
    strict = _client(sim.url, timeout_s=0.3, retries=0)
    with pytest.raises(UpstreamUnavailable) as info:
        await strict.read(request(standin_tokenizer, i=0))
    await strict.aclose()
    assert info.value.kind == "timeout"
    patient = _client(sim.url, timeout_s=0.3, retries=1)
    result = await patient.read(request(standin_tokenizer, i=1))
    await patient.aclose()
    assert result.rows
    assert sim.stats()["faults"]["hang"] == 2


async def test_a_missing_label_is_reported_as_malformed(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim(malformed_rate=1.0)
    upstream = _client(sim.url)
    f = flow(standin_tokenizer)
    (req,) = f.next_requests()
    result = await upstream.read(req)
    with pytest.raises(MalformedResponse):
        f.record(req, result)
    f.record(req, await upstream.read(req))  # the second delivery is whole
    await upstream.aclose()
    assert sim.stats()["faults"]["malformed"] == 1


async def test_injected_faults_are_counted_and_predictable(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim(fail_rate=0.3, seed=5)
    requests = [request(standin_tokenizer, i=i) for i in range(40)]
    expected = FaultPlan(FaultRates(fail=0.3), seed=5)
    n_faults = sum(expected.draw(encode_body(r.body)) == "fail" for r in requests)
    upstream = _client(sim.url, retries=2)
    results = await asyncio.gather(*map(upstream.read, requests))
    await upstream.aclose()
    assert all(r.rows for r in results)
    stats = sim.stats()
    assert 0 < n_faults < 40
    assert stats["faults"]["fail"] == n_faults
    assert stats["requests"] == 40 + n_faults


async def test_capacity_eight_reads_take_two_steps(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim(step_ms=50, max_batch=4)
    upstream = _client(sim.url)
    await upstream.fingerprint()
    requests = [request(standin_tokenizer, i=i) for i in range(8)]
    started = time.perf_counter()
    await asyncio.gather(*map(upstream.read, requests))
    elapsed = time.perf_counter() - started
    await upstream.aclose()
    assert sim.stats()["steps"] == 2
    assert 0.09 < elapsed < 0.5


async def test_fingerprint_reports_the_served_model_and_max_model_len(make_sim: MakeSim) -> None:
    """vLLM's /v1/models does not report the canvas: the fingerprint records the client's, and a
    probe read at that width proves it (``test_a_narrower_canvas_refuses_the_probe``)."""
    sim = make_sim(canvas_length=160, max_model_len=4096)
    upstream = _client(sim.url)
    assert upstream.max_model_len is None
    fp = await upstream.fingerprint()
    await upstream.aclose()
    assert (fp.engine, fp.model_id, fp.max_model_len, fp.canvas_length) == (
        "sim", "dgemma", 4096, 320)
    assert upstream.max_model_len == 4096
    assert fp.version is not None and fp.version.startswith("dreads-sim")


async def test_a_narrower_canvas_refuses_the_probe(make_sim: MakeSim,
                                                   standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim(canvas_length=160)
    probe = build_probe_request(ReadSettings(canvas_length=320), standin_tokenizer)
    assert probe.body["vllm_xargs"]["diffusion_canvas_length"] == 320
    upstream = _client(sim.url)
    with pytest.raises(UpstreamRejected, match="no larger than the served canvas"):
        await upstream.wait_ready(timeout_s=5, probe=probe)
    fits = build_probe_request(ReadSettings(canvas_length=160), standin_tokenizer)
    await upstream.wait_ready(timeout_s=5, probe=fits)
    await upstream.aclose()


async def test_an_api_key_is_sent_and_a_refused_one_is_never_retried(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim(api_key="pod-key")
    keyless = _client(sim.url, retries=4)
    with pytest.raises(UpstreamUnauthorized, match="DREADS_UPSTREAM_API_KEY") as info:
        await keyless.read(request(standin_tokenizer))
    assert info.value.kind == "unauthorized" and info.value.status == 401
    with pytest.raises(UpstreamUnauthorized):  # the control plane too, at once
        await keyless.wait_ready(timeout_s=30)
    await keyless.aclose()
    assert sim.stats()["unauthorized"] == 2
    keyed = VllmUpstream(sim.url, model="dgemma", canvas_length=320, api_key="pod-key")
    await keyed.wait_ready(timeout_s=5, probe=request(standin_tokenizer))
    result = await keyed.read(request(standin_tokenizer))
    await keyed.aclose()
    assert result.rows


async def test_wait_ready_waits_for_a_server_that_is_still_loading(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim(down_for_s=1.0)
    upstream = _client(sim.url)
    started = time.monotonic()
    await upstream.wait_ready(timeout_s=15, probe=request(standin_tokenizer))
    await upstream.aclose()
    assert time.monotonic() - started >= 0.8
    assert sim.stats()["reads"] == 1


async def test_wait_ready_gives_up_with_a_message(standin_tokenizer: HFTextTokenizer) -> None:
    sock, url = _refusing_port()
    upstream = _client(url)
    try:
        with pytest.raises(UpstreamUnavailable, match="not ready after 1s"):
            await upstream.wait_ready(timeout_s=1.0, probe=request(standin_tokenizer))
    finally:
        await upstream.aclose()
        sock.close()


async def test_wait_ready_names_the_served_model_when_ours_is_wrong(make_sim: MakeSim) -> None:
    sim = make_sim(model="served-name")
    upstream = _client(sim.url)
    with pytest.raises(UpstreamRejected, match="--model served-name"):
        await upstream.wait_ready(timeout_s=5)
    await upstream.aclose()


def test_one_upstream_serves_successive_event_loops(
        make_sim: MakeSim, standin_tokenizer: HFTextTokenizer) -> None:
    sim = make_sim()
    upstream = _client(sim.url)
    req = request(standin_tokenizer)
    first = asyncio.run(upstream.read(req))
    second = asyncio.run(upstream.read(req))
    asyncio.run(upstream.aclose())
    assert first.rows == second.rows
