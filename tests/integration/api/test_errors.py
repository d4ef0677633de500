"""Every error a client of ``dreads serve`` can cause, with its status, body and headers.

Shapes as Jev answers: 422 is FastAPI's validation list; an unaskable question is a 400 with a
plain-text ``detail``; the rest are ``{"detail": {"error_type", "message"}}``. Every response,
errors included, carries the request id.
"""

from __future__ import annotations

import asyncio
import gzip
import re
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from backports.zstd import compress as zstd_compress

from app.sim import SimHandle, SimOptions, start_sim_thread
from tests.fixtures.api import ServeProcess
from tests.fixtures.services import ROOT, VENV_BIN, free_port, wait_until

KEY = "s3cret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
NOUL = {"type": "noul", "instructions": "Is this about billing?"}
REQUEST_ID = re.compile(r"^req_[0-9a-f]{32}$")


def body(**changes: Any) -> dict[str, Any]:
    return {"model": "jev-latest", "state": "I was charged twice.",
            "questions": {"billing": NOUL}, **changes}


@pytest.fixture(scope="module")
def guarded(module_serve_factory: Callable[..., ServeProcess]) -> ServeProcess:
    """A server with an API key and a 50 KiB body limit, on an in-process simulator."""
    return module_serve_factory("--upstream", "sim", env={
        "DREADS_API_KEY": KEY, "DREADS_API_MAX_BODY_MB": str(50 / 1024)})


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[SimHandle]:
    handle = start_sim_thread(SimOptions(step_ms=300, max_batch=64))
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def small(module_serve_factory: Callable[..., ServeProcess], slow_sim: SimHandle
          ) -> ServeProcess:
    """Two requests at once at most, no read retries, a simulator with a 300 ms step."""
    return module_serve_factory("--upstream", slow_sim.url, "--max-concurrent", "2",
                                env={"DREADS_READ_RETRIES": "0"})


def post(server: ServeProcess, payload: Any, **kwargs: Any) -> httpx.Response:
    headers = {**AUTH, **kwargs.pop("headers", {})}
    return httpx.post(f"{server.url}/v1/systemone", json=payload, headers=headers,
                      timeout=30.0, **kwargs)


def detail(response: httpx.Response) -> Any:
    return response.json()["detail"]


def assert_request_id(response: httpx.Response) -> None:
    rid = response.headers["x-request-id"]
    assert REQUEST_ID.match(rid)
    assert response.headers["x-typesafe-request-id"] == rid
    assert response.headers["server-timing"].startswith("total;dur=")


# -- 422: wrong field shapes ------------------------------------------------------------------
@pytest.mark.parametrize(("payload", "loc", "kind"), [
    ({"model": "jev-latest", "questions": {"billing": NOUL}}, ["body", "state"], "missing"),
    (body(questions={}), ["body", "questions"], "too_short"),
    (body(questions={"q": {"type": "bool", "instructions": "x"}}), ["body", "questions", "q"],
     "union_tag_invalid"),
    (body(questions={"u": {"type": "score", "criteria": "low, high"}}),
     ["body", "questions", "u", "score", "criteria"], "list_type"),
    (body(questions={"c": {"type": "choice", "instructions": "x"}}),
     ["body", "questions", "c", "choice", "criteria"], "missing"),
    (body(state=42), ["body", "state", "str"], "string_type"),
])
def test_wrong_field_shapes_are_422_with_fastapis_error_list(
        guarded: ServeProcess, payload: dict[str, Any], loc: list[Any], kind: str) -> None:
    response = post(guarded, payload)
    assert response.status_code == 422
    errors = detail(response)
    assert any(e["loc"] == loc and e["type"] == kind for e in errors), errors
    assert_request_id(response)


# -- 400: unaskable questions, unknown model -----------------------------------------------------
@pytest.mark.parametrize(("question", "text"), [
    ({"type": "box", "instructions": "the dog"},
     "Question 'q' is a box question: boxes need an image and a vision model, and this server "
     "reads text. Ask noul, choice or score."),
    ({"type": "score", "criteria": [f"level {i}" for i in range(11)]},
     "Too many score levels. Must have at most 10 levels."),
    ({"type": "choice", "criteria": {f"option {i}": None for i in range(27)}},
     "Too many choices. Must have at most 26 choices (question 'q' has 27)."),
    ({"type": "noul"}, "question 'q': a noul question needs 'instructions', or 'criteria' "
     "describing what counts as yes or no"),
    ({"type": "noul", "instructions": "   "}, "question 'q': 'instructions' must not be blank; "
     "leave it out or write the question"),
])
def test_unaskable_questions_are_400_with_a_plain_text_detail(
        guarded: ServeProcess, question: dict[str, Any], text: str) -> None:
    response = post(guarded, body(questions={"q": question}))
    assert response.status_code == 400
    assert detail(response) == text


def test_an_asset_that_is_not_an_image_is_400_naming_it(guarded: ServeProcess) -> None:
    response = post(guarded, body(assets={"img-1": {"type": "image", "format": "png",
                                                    "data_base64": "iVBORw0KGgo="}}))
    assert response.status_code == 400
    assert "not an image pillow can read" in detail(response)


@pytest.mark.parametrize(("extra", "named"), [
    ({"image": ["https://example.com/a.png"]}, "'image'"),
    ({"temperature": 0.0}, "'temperature'"),
    ({"questions": {"billing": {**NOUL, "weight": 2}}}, "'questions.billing.noul.weight'"),
])
def test_an_unknown_field_is_400_naming_it(guarded: ServeProcess, extra: dict[str, Any],
                                          named: str) -> None:
    response = post(guarded, body(**extra))
    assert response.status_code == 400
    assert detail(response).startswith(f"Unknown field(s) {named}: this server reads every "
                                        "field it takes and drops none.")


def test_joint_must_agree_with_the_servers_read_mode(guarded: ServeProcess) -> None:
    two = {"billing": NOUL, "refund": {"type": "noul", "instructions": "Is a refund asked?"}}
    response = post(guarded, body(questions=two, joint=True))
    assert response.status_code == 400
    assert detail(response).startswith("joint: true, but this server reads one question per "
                                       "canvas (--read-mode isolated)")


def test_audio_and_video_are_refused_as_vllm_refuses_them(guarded: ServeProcess) -> None:
    response = post(guarded, body(audio=["https://example.com/a.wav"],
                                  videos=["https://example.com/v.mp4"]))
    assert response.status_code == 400
    assert detail(response) == ("this model does not take audio, video inputs: it reads "
                                "images only (send them in 'images')")


def test_an_unknown_model_is_400_api_usage_error_and_aliases_are_accepted(
        guarded: ServeProcess) -> None:
    response = post(guarded, body(model="jev-1.13.0"))
    assert response.status_code == 400
    assert detail(response) == {
        "error_type": "api_usage_error",
        "message": "Unknown model: jev-1.13.0. This server answers with 'dgemma', "
                   "'jev-latest', 'jev-preview'."}
    for name in ("jev-latest", "jev-preview", "dgemma"):
        assert post(guarded, body(model=name)).status_code == 200


def test_a_prompt_past_the_served_context_is_400_before_any_read(
        guarded: ServeProcess) -> None:
    """A state longer than the served max_model_len: refused with the token counts, before
    any read (vLLM would cut the canvas and answer rows that are not there)."""
    response = post(guarded, body(state="word " * 9000))
    assert response.status_code == 400
    assert detail(response)["error_type"] == "invalid_request_error"
    assert "more than the server's max_model_len 8192" in detail(response)["message"]


# -- 401 / 403 ------------------------------------------------------------------------------------
def test_no_key_is_403_and_a_wrong_key_is_401(guarded: ServeProcess) -> None:
    missing = httpx.post(f"{guarded.url}/v1/systemone", json=body())
    assert missing.status_code == 403
    assert detail(missing)["error_type"] == "permission_error"
    assert "Authorization: Bearer" in detail(missing)["message"]
    wrong = post(guarded, body(), headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert detail(wrong) == {"error_type": "authentication_error", "message": "Invalid API key"}
    assert_request_id(wrong)
    for path in ("/v1/models", "/v1/runs"):
        assert httpx.get(f"{guarded.url}{path}").status_code == 403
        assert httpx.get(f"{guarded.url}{path}", headers=AUTH).status_code == 200


def test_health_and_the_api_docs_need_no_key(guarded: ServeProcess) -> None:
    response = httpx.get(f"{guarded.url}/health")
    assert response.status_code == 200
    assert response.json()["simulator"] is True
    spec = httpx.get(f"{guarded.url}/openapi.json").json()
    assert {"/v1/systemone", "/v1/models", "/v1/runs", "/v1/runs/{run}/results"} <= set(
        spec["paths"])
    assert httpx.get(f"{guarded.url}/docs").status_code == 200


# -- 413 / 415 and encodings ----------------------------------------------------------------------
def test_a_body_over_the_limit_is_413(guarded: ServeProcess) -> None:
    response = post(guarded, body(state="x" * 60_000))
    assert response.status_code == 413
    assert detail(response)["error_type"] == "request_too_large"
    assert "DREADS_API_MAX_BODY_MB" in detail(response)["message"]
    assert_request_id(response)


def test_a_compressed_body_is_bounded_after_decoding(guarded: ServeProcess) -> None:
    """A 4 MiB state squeezed into a few hundred bytes of zstd is refused, not inflated."""
    bomb = zstd_compress(orjson.dumps(body(state="a" * (4 << 20))))
    assert len(bomb) < 2000
    response = httpx.post(f"{guarded.url}/v1/systemone", content=bomb, headers={
        **AUTH, "content-type": "application/json", "content-encoding": "zstd"})
    assert response.status_code == 413


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_gzip_and_zstd_bodies_are_answered(guarded: ServeProcess, encoding: str) -> None:
    raw = orjson.dumps(body())
    packed = gzip.compress(raw) if encoding == "gzip" else zstd_compress(raw)
    response = httpx.post(f"{guarded.url}/v1/systemone", content=packed, headers={
        **AUTH, "content-type": "application/json", "content-encoding": encoding})
    assert response.status_code == 200, response.text
    assert response.json()["answers"]["billing"]["type"] == "noul"


def test_an_unknown_content_encoding_is_415(guarded: ServeProcess) -> None:
    response = httpx.post(f"{guarded.url}/v1/systemone", content=b"...", headers={
        **AUTH, "content-type": "application/json", "content-encoding": "br"})
    assert response.status_code == 415
    assert "gzip, deflate or zstd" in detail(response)["message"]


# -- 503 / 529 ------------------------------------------------------------------------------------
def test_too_many_requests_in_flight_get_529_with_retry_after(small: ServeProcess) -> None:
    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30.0) as client:
            return await asyncio.gather(*(
                client.post(f"{small.url}/v1/systemone", json=body()) for _ in range(6)))

    responses = asyncio.run(burst())
    statuses = sorted(r.status_code for r in responses)
    assert statuses.count(200) >= 2 and 529 in statuses, statuses
    overloaded = next(r for r in responses if r.status_code == 529)
    assert overloaded.headers["retry-after"] == "1"
    assert detail(overloaded)["error_type"] == "overloaded_error"
    assert_request_id(overloaded)


def test_an_upstream_that_is_down_gives_503_with_retry_after(
        small: ServeProcess, slow_sim: SimHandle) -> None:
    httpx.post(f"{slow_sim.url}/sim/down", params={"seconds": 60}).raise_for_status()
    try:
        response = httpx.post(f"{small.url}/v1/systemone", json=body(), timeout=30.0)
    finally:
        httpx.post(f"{slow_sim.url}/sim/up").raise_for_status()
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    assert detail(response)["error_type"] == "api_error"
    assert detail(response)["message"].startswith("the model server is unavailable: ")
    assert httpx.post(f"{small.url}/v1/systemone", json=body(), timeout=30.0).status_code == 200


def test_an_unreachable_upstream_gives_503(serve_factory: Callable[..., ServeProcess]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    server = serve_factory("--upstream", dead, "--model", "dgemma", "--tokenizer", "standin",
                           env={"DREADS_READ_RETRIES": "0"})
    assert httpx.get(f"{server.url}/health").json()["upstream_ready"] is False
    response = httpx.post(f"{server.url}/v1/systemone", json=body(), timeout=30.0)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    assert dead in detail(response)["message"]


def test_serve_refuses_an_open_api_beyond_loopback_before_opening_anything() -> None:
    out = subprocess.run([str(VENV_BIN / "dreads"), "serve", "--host", "0.0.0.0",
                          "--upstream", "sim"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"})
    assert out.returncode == 2
    assert "needs DREADS_API_KEY" in out.stderr


# -- a client that hangs up ----------------------------------------------------------------------
def test_a_client_that_hangs_up_cancels_its_reads_up_to_the_model_server(
        serve_factory: Callable[..., ServeProcess]) -> None:
    """The simulator holds every read until the client gives up. The API client leaves after
    1 s: the server cancels the decision, its slot is free at once, and the model server sees
    the read abandoned (vLLM aborts a request whose client is gone)."""
    sim = start_sim_thread(SimOptions(hang_rate=1.0))
    try:
        server = serve_factory("--upstream", sim.url, env={"DREADS_READ_RETRIES": "0",
                                                           "DREADS_READ_TIMEOUT_S": "120"})
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.url}/v1/systemone", json=body(), timeout=1.0)
        wait_until(lambda: httpx.get(f"{server.url}/health").json()["in_flight"] == 0,
                   timeout_s=5, what="the abandoned request to let go of its slot")
        wait_until(lambda: httpx.get(f"{sim.url}/sim/stats").json()["abandoned"] == 1,
                   timeout_s=5, what="the model server to see the read abandoned")
    finally:
        sim.stop()


def test_serve_logs_its_start_once_and_no_line_per_request(
        serve_factory: Callable[..., ServeProcess]) -> None:
    server = serve_factory("--upstream", "sim")
    response = httpx.post(f"{server.url}/v1/systemone", json=body(), timeout=30.0)
    assert response.status_code == 200
    log = server.log_text()
    assert log.count("Started server process") == 1, log  # not the simulator's too
    assert log.count("Application startup complete") == 1, log
    assert "HTTP Request:" not in log and "alembic" not in log, log
