"""The simulator's images: chat ``image_url`` parts read, counted toward ``max_model_len`` by
Gemma 4's rule, hashed into the answer, and refused as vLLM refuses them."""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
from PIL import Image

from app.engine import Endpoint, Layout, ReadSettings, parse_decision, plan_decision
from app.engine.wire import build_request
from app.images import ImagePolicy, fetch_image
from app.sim.images import image_limit
from app.tokenizer.hf import HFTextTokenizer
from tests.unit.sim.conftest import DECISION, AsgiClient

CHAT = "/v1/chat/completions"
SLOT = 3  # dreads' document-first canvas "q0: <slot>": position 3


def _png(width: int, height: int, color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format="PNG")
    return out.getvalue()


def _data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


RED, BLUE = _png(64, 48, (200, 0, 0)), _png(64, 48, (0, 0, 200))


def _with_images(body: dict[str, Any], *urls: str) -> dict[str, Any]:
    """The body with its user turn as content parts: the images first, then the text (the
    order vLLM's reader puts them in)."""
    body = copy.deepcopy(body)
    user = next(m for m in body["messages"] if m["role"] == "user")
    user["content"] = [*({"type": "image_url", "image_url": {"url": u}} for u in urls),
                       {"type": "text", "text": user["content"]}]
    return body


def _p_yes(answer: dict[str, Any], tokenizer: HFTextTokenizer) -> float:
    entry = answer["choices"][0]["logprobs"]["content"][SLOT]
    lp = {t["token"]: t["logprob"] for t in entry["top_logprobs"]}
    yes, no = (f"token_id:{tokenizer.encode(w)[0]}" for w in (" yes", " no"))
    return 1.0 / (1.0 + math.exp(lp[no] - lp[yes]))


_HOSTED = {"/red.png": ("image/png", RED), "/notes.txt": ("text/plain", b"not a picture")}


class _Images(BaseHTTPRequestHandler):
    """A tiny image host: /red.png, /notes.txt; anything else 404."""

    def do_GET(self) -> None:
        found = _HOSTED.get(self.path)
        if found is None:
            self.send_error(404)
            return
        media_type, data = found
        self.send_response(200)
        self.send_header("content-type", media_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def image_host() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_an_image_changes_the_answer_and_the_same_image_gives_the_same_one(
        asgi_client: AsgiClient, body: dict[str, Any],
        standin_tokenizer: HFTextTokenizer) -> None:
    client = asgi_client()
    answers = []
    for urls in ((), (_data_url(RED),), (_data_url(BLUE),), (_data_url(RED),)):
        response = await client.post(CHAT, json=_with_images(body, *urls) if urls else body)
        assert response.status_code == 200, response.text
        answers.append(_p_yes(response.json(), standin_tokenizer))
    text_only, red, blue, red_again = answers
    assert red != text_only
    assert red != blue
    assert red == red_again
    assert client.sim_app.stats()["images"] == 3  # type: ignore[attr-defined]


async def test_an_images_prompt_tokens_follow_gemma4s_rule(
        asgi_client: AsgiClient, body: dict[str, Any],
        standin_tokenizer: HFTextTokenizer) -> None:
    client = asgi_client()

    async def prompt_tokens(data: bytes) -> int:
        response = await client.post(CHAT, json=_with_images(body, _data_url(data)))
        assert response.status_code == 200, response.text
        return int(response.json()["usage"]["prompt_tokens"])

    # resized keeping the aspect ratio to at most 280 blocks of 48x48 pixels, one soft token
    # each, between <|image> and <image|>: a square takes 16 x 16 blocks, a 20:1 strip 3 x 74
    assert len(standin_tokenizer.image_ids(48, 48)) == 256 + 2
    assert len(standin_tokenizer.image_ids(960, 48)) == 222 + 2
    square = await prompt_tokens(_png(48, 48, (1, 2, 3)))
    strip = await prompt_tokens(_png(960, 48, (1, 2, 3)))
    assert square - strip == 256 - 222


async def test_an_image_reads_prompt_tokens_are_the_ones_dreads_plans(
        asgi_client: AsgiClient, standin_tokenizer: HFTextTokenizer) -> None:
    url = _data_url(_png(640, 480, (4, 5, 6)))
    decision = parse_decision({"id": "d", "state": "A parcel.", "images": [url], "questions": {
        "damage": {"type": "noul", "instructions": "Is it damaged?"}}})
    settings = ReadSettings(layout=Layout.VLLM, endpoint=Endpoint.CHAT)
    plan = plan_decision(decision, settings, standin_tokenizer,
                         images=[fetch_image(url, policy=ImagePolicy())])
    request = build_request(plan.units[0], settings, draw=0, seed=1,
                            vocab_size=standin_tokenizer.info.vocab_size)
    response = await asgi_client().post(CHAT, json=dict(request.body))
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] == len(plan.units[0].prompt_ids)


async def test_an_image_counts_toward_max_model_len(
        asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    probe = asgi_client()
    small = _with_images(body, _data_url(_png(960, 48, (9, 9, 9))))  # 222 soft tokens
    n_small = (await probe.post(CHAT, json=small)).json()["usage"]["prompt_tokens"]
    client = asgi_client(max_model_len=n_small + 20)
    assert (await client.post(CHAT, json=small)).status_code == 200
    large = _with_images(body, _data_url(_png(640, 480, (9, 9, 9))))  # 266 soft tokens
    response = await client.post(CHAT, json=large)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "input_tokens"
    assert f"your prompt contains {n_small + 266 - 222} input tokens" in error["message"]


async def test_more_images_than_the_limit_is_vllms_400(
        asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    client = asgi_client(image_limit=1)
    assert (await client.post(CHAT, json=_with_images(body, _data_url(RED)))).status_code == 200
    response = await client.post(CHAT, json=_with_images(body, _data_url(RED), _data_url(BLUE)))
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("BadRequestError", "image", 400)
    assert error["message"].startswith("At most 1 image(s) may be provided in one prompt.")


async def test_bytes_that_are_not_an_image_are_refused(
        asgi_client: AsgiClient, body: dict[str, Any]) -> None:
    response = await asgi_client().post(
        CHAT, json=_with_images(body, _data_url(b"plain text", "image/png")))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "BadRequestError"
    assert error["message"].startswith("cannot identify image file (image 0")


async def test_http_images_are_fetched_and_bad_urls_refused(
        asgi_client: AsgiClient, body: dict[str, Any], image_host: str,
        standin_tokenizer: HFTextTokenizer) -> None:
    client = asgi_client()
    by_url = await client.post(CHAT, json=_with_images(body, f"{image_host}/red.png"))
    by_data = await client.post(CHAT, json=_with_images(body, _data_url(RED)))
    assert by_url.status_code == 200, by_url.text
    # the same bytes by URL or inline: the same answer
    assert _p_yes(by_url.json(), standin_tokenizer) == _p_yes(by_data.json(), standin_tokenizer)
    assert client.sim_app.stats()["image_fetches"] == 1  # type: ignore[attr-defined]

    not_image = await client.post(CHAT, json=_with_images(body, f"{image_host}/notes.txt"))
    assert not_image.status_code == 400
    assert "cannot identify image file" in not_image.json()["error"]["message"]
    missing = await client.post(CHAT, json=_with_images(body, f"{image_host}/gone.png"))
    assert missing.status_code == 400
    assert missing.json()["error"]["message"].startswith("404, message='Not Found'")
    refused = await client.post(CHAT, json=_with_images(body, "http://127.0.0.1:9/x.png"))
    assert refused.status_code == 400
    assert "Cannot fetch image 0 from http://127.0.0.1:9/x.png" in (
        refused.json()["error"]["message"])
    local = await client.post(CHAT, json=_with_images(body, "file:///etc/hostname"))
    assert local.status_code == 400
    assert local.json()["error"]["message"].startswith(
        "The URL must be either a HTTP, data or file URL.")


async def test_a_completions_prompt_cannot_hold_images(
        asgi_client: AsgiClient, body: dict[str, Any],
        standin_tokenizer: HFTextTokenizer) -> None:
    image_id = standin_tokenizer.image_ids(48, 48)[1]  # the image placeholder's id
    request = {key: value for key, value in body.items()
               if key not in ("messages", "add_generation_prompt", "continue_final_message")}
    request["prompt"] = [2, 5, image_id, 7]
    response = await asgi_client().post("/v1/completions", json=request)
    assert response.status_code == 400
    assert "/v1/chat/completions" in response.json()["error"]["message"]


async def test_an_answer_key_line_may_name_the_images(
        asgi_client: AsgiClient, body: dict[str, Any], standin_tokenizer: HFTextTokenizer,
        tmp_path: Path) -> None:
    question = DECISION["questions"]["conflict"]["instructions"]
    lines = [{"state": DECISION["state"], "question": question, "label": label,
              "image_sha256": [hashlib.sha256(data).hexdigest()]}
             for label, data in (("yes", RED), ("no", BLUE))]
    key = tmp_path / "key.jsonl"
    key.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    client = asgi_client(key_path=str(key), separation=6.0, noise=0.1)
    red = await client.post(CHAT, json=_with_images(body, _data_url(RED)))
    blue = await client.post(CHAT, json=_with_images(body, _data_url(BLUE)))
    assert _p_yes(red.json(), standin_tokenizer) > 0.95
    assert _p_yes(blue.json(), standin_tokenizer) < 0.05


def test_the_image_limit_reads_vllms_flag() -> None:
    assert image_limit(None) == 999
    assert image_limit('{"image": 2}') == 2
    assert image_limit('{"image": {"count": 3}, "video": 0}') == 3
    for bad in ("4", '{"image": -1}', "{image: 2}"):
        with pytest.raises(ValueError, match="--limit-mm-per-prompt"):
            image_limit(bad)


# -- the simulator's /v1/systemone: vLLM's reader takes images --------------------------------
def _decision_body(**changes: Any) -> dict[str, Any]:
    return {"model": "dgemma", "state": "A parcel on a doorstep.",
            "questions": {"damage": {"type": "noul", "instructions": "Is it damaged?"}},
            **changes}


async def test_vllms_reader_reads_images_before_the_text(asgi_client: AsgiClient) -> None:
    client = asgi_client()
    answers = []
    for urls in ([_data_url(RED)], [_data_url(BLUE)], [_data_url(RED)]):
        response = await client.post("/v1/systemone", json=_decision_body(images=urls))
        assert response.status_code == 200, response.text
        answers.append(response.json()["answers"]["damage"]["noul"])
    assert answers[0] != answers[1] and answers[0] == answers[2]
    # each request's image fetched once, and read again from the chat read's image part
    assert client.sim_app.stats()["images"] == 2 * 3  # type: ignore[attr-defined]
    null_state = await client.post("/v1/systemone",
                                   json=_decision_body(state=None, images=[_data_url(RED)]))
    assert null_state.status_code == 200, null_state.text


async def test_vllms_reader_refuses_a_bad_image_and_audio(asgi_client: AsgiClient) -> None:
    client = asgi_client()
    bad = await client.post("/v1/systemone",
                            json=_decision_body(images=[_data_url(b"not a picture")]))
    assert bad.status_code == 400
    assert bad.json()["error"]["message"].startswith("media: cannot identify image file")
    audio = await client.post("/v1/systemone",
                              json=_decision_body(audio=["data:audio/wav;base64,AAAA"]))
    assert audio.status_code == 400
    assert audio.json()["error"]["message"] == "this model does not take audio inputs"
