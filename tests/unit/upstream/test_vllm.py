"""How ``VllmUpstream`` classifies an HTTP answer: retry, give up, or malformed."""

from __future__ import annotations

import pytest

from app.errors import MalformedResponse, ModelNotServed, UpstreamRejected, UpstreamUnavailable
from app.upstream.vllm import _decode

VLLM_400 = (b'{"error": {"message": "seed sampling parameters are not yet supported", '
            b'"type": "BadRequestError", "param": "seed", "code": 400}}')


@pytest.mark.parametrize(("status", "body"), [(500, b'{"error": {"message": "boom"}}'),
                                               (503, b""), (429, b"slow down"), (408, b"")])
def test_transient_statuses_are_retryable(status: int, body: bytes) -> None:
    with pytest.raises(UpstreamUnavailable) as info:
        _decode(status, body)
    assert (info.value.kind, info.value.status) == ("server_error", status)


def test_a_400_is_rejected_with_vllms_message_and_param() -> None:
    with pytest.raises(UpstreamRejected) as info:
        _decode(400, VLLM_400)
    assert info.value.param == "seed"
    assert "not yet supported" in info.value.message


@pytest.mark.parametrize("body", [b"<html>", b"[1, 2]"])
def test_a_200_that_is_not_a_json_object_is_malformed(body: bytes) -> None:
    with pytest.raises(MalformedResponse):
        _decode(200, body)


def test_a_404_for_a_model_not_served_is_the_workers_configuration() -> None:
    body = (b'{"object": "error", "message": "The model `alpha` does not exist.", '
            b'"type": "NotFoundError", "param": null, "code": 404}')
    with pytest.raises(ModelNotServed) as info:
        _decode(404, body)
    assert info.value.kind == "not_served" and "alpha" in info.value.message
    with pytest.raises(UpstreamRejected) as other:
        _decode(404, b'{"error": {"message": "unknown route POST /v2/x"}}')
    assert not isinstance(other.value, ModelNotServed)
