"""Images over HTTP: typesafe-sdk and the openai SDK against a real ``dreads serve`` on the
simulator, and the simulator's own ``/v1/decisions`` (vLLM 0.33's reader), which refuses them.

``dreads serve`` reads a request's images on the chat endpoint (the image parts first, then the
text, as vLLM's reader puts them); the simulator hashes each image into its answer, so a request
whose image was dropped would get the text-only answer.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.decision import AnswerAnswerResourcePredicate
from PIL import Image as PILImage
from typesafe_sdk import Image, Noul, TypeSafeClient

from app.sim import SimHandle, SimOptions, start_sim_thread
from tests.fixtures.api import ServeProcess

DAMAGE = Noul(instructions="Does the parcel in the photo show damage?")
PREDICATE = {"type": "predicate", "name": "damage",
             "instructions": "The parcel in the photo shows damage."}


def _png(color: tuple[int, int, int], size: tuple[int, int] = (64, 48)) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


def _data_url(data: bytes) -> str:
    return f"data:image/png;base64,{base64.b64encode(data).decode()}"


RED, BLUE = _png((200, 0, 0)), _png((0, 0, 200))


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    handle = start_sim_thread(SimOptions(record_bodies=50))
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def server(module_serve_factory: Callable[..., ServeProcess], sim: SimHandle) -> ServeProcess:
    return module_serve_factory("--upstream", sim.url, "--draws", "1")


@pytest.fixture
def jev(server: ServeProcess, monkeypatch: pytest.MonkeyPatch) -> TypeSafeClient:
    monkeypatch.setenv("TYPESAFE_BASE_URL", server.url)
    monkeypatch.setenv("TYPESAFE_API_KEY", "unused-without-DREADS_API_KEY")
    return TypeSafeClient()


def _p_damage(client: TypeSafeClient, **kwargs: Any) -> float:
    result = client.system_one(questions={"damage": DAMAGE}, **kwargs)
    return float(result.nouls["damage"].noul)


def test_typesafe_sdk_sends_an_image_asset_and_each_image_gets_its_own_answer(
        jev: TypeSafeClient, sim: SimHandle) -> None:
    text_only = _p_damage(jev, state="A parcel on a doorstep.")
    red = _p_damage(jev, state=Image(RED))  # sent as multipart: the JSON, then the image part
    blue = _p_damage(jev, state=Image(BLUE))
    red_again = _p_damage(jev, state=Image(RED))
    assert len({text_only, red, blue}) == 3
    assert red == red_again
    stats = httpx.get(f"{sim.url}/sim/stats").json()
    assert stats["images"] >= 3  # every image reached the model server


def test_vllms_images_field_is_answered(jev: TypeSafeClient, sim: SimHandle) -> None:
    by_asset = _p_damage(jev, state=Image(RED))
    by_field = _p_damage(jev, state="(none)",  # the SDK needs a state; the body sets null
                         extra_body={"state": None, "images": [_data_url(RED)]})
    assert by_field == by_asset  # the same picture, the same null state: the same read
    body = sim.bodies[-1]
    assert b'"image_url"' in body


def test_an_image_url_that_does_not_answer_is_400_naming_it(server: ServeProcess) -> None:
    response = httpx.post(f"{server.url}/v1/systemone", timeout=30.0, json={
        "model": "jev-latest", "state": None, "images": ["http://127.0.0.1:9/gone.png"],
        "questions": {"damage": {"type": "noul", "instructions": "Damaged?"}}})
    assert response.status_code == 400
    assert "http://127.0.0.1:9/gone.png" in response.json()["detail"]


def test_openai_sdk_input_image_is_answered_as_openais_hosted_api_takes_it(
        server: ServeProcess) -> None:
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)

    def p_damage(data: bytes) -> float:
        decision = client.decisions.create(model="dgemma", questions=[PREDICATE], input=[
            {"role": "user", "content": [{"type": "input_image", "image_url": _data_url(data)},
                                         {"type": "input_text", "text": "A parcel."}]}])
        (answer,) = decision.answers
        assert isinstance(answer, AnswerAnswerResourcePredicate)
        return answer.probability

    assert p_damage(RED) != p_damage(BLUE)


def test_openai_sdk_gets_vllms_refusal_for_input_image_from_vllms_reader(
        sim: SimHandle) -> None:
    client = OpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.decisions.create(model="dgemma", questions=[PREDICATE], input=[
            {"role": "user", "content": [{"type": "input_image",
                                          "image_url": _data_url(RED)}]}])
    assert err.value.status_code == 400
    assert "Decisions supports text input only; images are not supported" in str(
        err.value.message)
